package fencelock

// Hooks for the tests of package fencelock_test, compiled into tests only.

// PauseRenewal stops l's renewals, as if its process had stopped renewing (the guard still
// declares the lease lost when only the safety margin is left).
func PauseRenewal(l *Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused == nil {
		l.paused = make(chan struct{})
	}
}

// ResumeRenewal undoes PauseRenewal: the renewal that is due goes out at once.
func ResumeRenewal(l *Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused != nil {
		close(l.paused)
		l.paused = nil
	}
}
