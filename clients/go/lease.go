package fencelock

import (
	"context"
	"sync"
	"time"
)

// State is where a [Lease] stands.
type State int

// The states of a lease. A lease goes from held to in jeopardy and back as renewals fail and
// succeed, and ends lost (or released), for good.
const (
	// StateHeld: the last renewal (or the grant) succeeded.
	StateHeld State = iota
	// StateJeopardy: renewals are failing, but the lease is surely held until
	// [Lease.HeldUntil]: finish quickly, start nothing long.
	StateJeopardy
	// StateLost: the holder can no longer be sure to hold the lease: stop working on the
	// protected resource. [Lease.Err] says why.
	StateLost
)

func (s State) String() string {
	return [...]string{"held", "in jeopardy", "lost"}[s]
}

// Lease is what an acquire grants — a lock's lease, a semaphore's permit, a read-write lock's
// hold, or several locks taken together — kept alive by a guard in the background until
// [Lease.Release], and that says as soon as its holder can no longer be sure to hold it.
//
// # How the guard counts time
//
// The guard never reads the server's wall clock to decide anything (clocks of two machines
// disagree). It counts on this process's monotonic clock from the moment each grant or
// renewal request was sent: the server set expires_at to its now plus the TTL, and its now
// was not before the send, so the lease lasts at least until send + TTL
// ([Lease.HeldUntil]). Counting from the answer would add the request's round trip to the
// lease.
//
// # When it gives up
//
// Renewals go out every third of the TTL; a failed one (no answer, a 5xx, a 429) is retried
// with a growing pause, and the lease is in jeopardy until one succeeds. The lease is lost
// ([Lease.Lost] is closed, [Lease.Context] cancelled, [Lease.Err] says why) as soon as:
//   - the server refuses a renewal: 404, the lease is gone (it expired or was force-released);
//     403, another owner holds it; 409, this owner holds a newer lease ([ReasonGone],
//     [ReasonTaken], [ReasonSuperseded]);
//   - renewals kept failing until only the safety margin (a fifth of the TTL) is left before
//     [Lease.HeldUntil] ([ReasonNotRenewed]): so lost comes before anyone else can be
//     granted the name, and the margin is the holder's time to stop;
//   - only the safety margin is left before the cap on holding ([MaxHold], [ReasonCapReached]);
//   - the grant was answered so late that only the margin, or less, was left of it: the lease
//     starts lost. (A grant answered later than a tenth of the TTL, after a wait, is first
//     confirmed by a renewal, so the guard counts from that renewal.)
//
// Nothing closes the gap of a paused process (the whole process stopped, its guard
// included): that is what the fencing token is for. Pass [Lease.Token] to the protected
// resource with every write; it keeps the highest token it accepted and refuses lower ones.
//
// Always call Release (defer it): a Lease is not released when it is dropped, and its guard
// renews it for as long as the process runs.
type Lease struct {
	client  *Client
	kind    Kind
	granted []Grant // as granted: names, owner and tokens never change, so renewals and releases are made from them
	terms   terms

	ctx         context.Context // cancelled on loss or release
	cancel      context.CancelFunc
	lost        chan struct{}      // closed on loss or release
	stopRenewal context.CancelFunc // ends the renewal goroutine and its request in flight
	renewalDone chan struct{}      // closed when the renewal goroutine has ended
	releaseOnce sync.Once

	mu       sync.Mutex
	kept     []kept // each grant as last confirmed, in the order asked for
	state    State
	err      error         // why it is lost, once it is
	lostOn   int           // the grant the server said is not ours, -1 if none
	jeopardy chan struct{} // closed when the lease goes in jeopardy or is lost; a new one once held again
	paused   chan struct{} // for tests: renewal waits while this is open (see export_test.go)
}

// newLease is the lease over kept, not yet renewed.
func newLease(c *Client, kind Kind, kept []kept, t terms) *Lease {
	l := &Lease{
		client:      c,
		kind:        kind,
		terms:       t,
		lost:        make(chan struct{}),
		renewalDone: make(chan struct{}),
		kept:        kept,
		lostOn:      -1,
		jeopardy:    make(chan struct{}),
	}
	for _, k := range kept {
		l.granted = append(l.granted, k.grant)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// Kind is the namespace of what is held: a lock, a semaphore or a read-write lock.
func (l *Lease) Kind() Kind { return l.kind }

// Name is the lock's resource (the semaphore's or read-write lock's name; for several locks,
// the first).
func (l *Lease) Name() string { return l.granted[0].Name }

// Owner is who holds the lease.
func (l *Lease) Owner() string { return l.granted[0].Owner }

// Token is the lease's fencing token (for several locks, the first one's: see [Lease.TokenOf]).
// Pass it to the protected resource with every write.
func (l *Lease) Token() uint64 { return l.granted[0].Token }

// TokenOf is the fencing token of the lock name, for a lease over several locks; false if
// the lease does not hold name.
func (l *Lease) TokenOf(name string) (uint64, bool) {
	for _, g := range l.granted {
		if g.Name == name {
			return g.Token, true
		}
	}
	return 0, false
}

// TTL is the TTL each renewal asks for.
func (l *Lease) TTL() time.Duration { return l.terms.ttl }

// SafetyMargin is how long before [Lease.HeldUntil] the lease is declared lost if renewals
// keep failing (or before the cap on holding).
func (l *Lease) SafetyMargin() time.Duration { return l.terms.margin }

// Grants are the leases held, as the server last confirmed them, in the order asked for.
func (l *Lease) Grants() []Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Grant, len(l.kept))
	for i, k := range l.kept {
		out[i] = k.grant
	}
	return out
}

// ExpiresAt is when the lease ends unless renewed, by the server's wall clock, as last
// confirmed (for several locks, the first to end): for people and logs. The guard counts with
// [Lease.HeldUntil].
func (l *Lease) ExpiresAt() time.Time {
	var first time.Time
	for _, g := range l.Grants() {
		if first.IsZero() || g.ExpiresAt.Before(first) {
			first = g.ExpiresAt
		}
	}
	return first
}

// HeldUntil is the moment, on this process's clock, before which the lease is surely live:
// the send of the last successful grant or renewal plus the TTL, or the cap on holding if
// that comes first (for several locks, the first of them to end).
func (l *Lease) HeldUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstToEnd().until
}

// State is held, in jeopardy, or lost.
func (l *Lease) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Jeopardy is closed as soon as the lease is in jeopardy (a renewal failed; the lease is still
// surely held until [Lease.HeldUntil]) or lost. Once a renewal succeeds again, Jeopardy
// returns a new channel, open until the next failure.
func (l *Lease) Jeopardy() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.jeopardy
}

// Lost is closed once the lease is lost, or released: stop working on the protected
// resource. [Lease.Err] says why.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Context is cancelled once the lease is lost, or released: hand it to the work done under the
// lease, so that the work stops in time. It carries no values and no deadline of its own;
// [Lease.Err] says why it was cancelled.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease is held (in jeopardy or not); once [Lease.Lost] is closed, a
// [*LostError] saying why, or [ErrReleased].
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Release stops the renewals and gives the lease back, each grant with its fencing token, so
// that a late release never frees a newer lease. A lease the server already said is gone or
// another's (404, 403, 409) is not an error: the guard is simply done. Any other failure is
// returned (the lease then ends at its TTL). Calls after the first do nothing and return nil.
//
// Made for defer: the release is sent even if ctx is already cancelled (the lease must not
// outlive the work it guarded), waiting at most the client's request timeout; a ctx still
// live when Release is called bounds the wait too. ctx's values reach the request.
func (l *Lease) Release(ctx context.Context) error {
	err := error(nil)
	l.releaseOnce.Do(func() { err = l.release(ctx) })
	return err
}

func (l *Lease) release(ctx context.Context) error {
	l.stopRenewal()
	<-l.renewalDone
	l.lose(ErrReleased, -1)
	l.mu.Lock()
	lostOn := l.lostOn
	l.mu.Unlock()
	if ctx.Err() != nil {
		ctx = detached{ctx}
	}
	errs := make([]error, len(l.granted))
	inParallel(len(l.granted), func(i int) {
		if i != lostOn {
			errs[i] = l.client.release(ctx, l.kind, l.granted[i])
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// lose marks the lease lost (once: the first reason stays) because of the grant at on, if the
// server said that one is not ours (-1: none).
func (l *Lease) lose(why error, on int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == StateLost {
		return
	}
	l.state, l.err, l.lostOn = StateLost, why, on
	closeOnce(l.jeopardy)
	close(l.lost)
	l.cancel()
}

// failed takes in a round of renewals in which at least one failed.
func (l *Lease) failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == StateHeld {
		l.state = StateJeopardy
		close(l.jeopardy)
	}
}

// renewed takes in a round of renewals sent at sent: each grant renewed where its renewal
// succeeded. Held again if every one did.
func (l *Lease) renewed(results []renewal, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := true
	for i, r := range results {
		if r.err != nil {
			all = false
			continue
		}
		l.kept[i].renewed(r.grant, sent, l.terms.ttl)
	}
	if all && l.state == StateJeopardy {
		l.state = StateHeld
		l.jeopardy = make(chan struct{})
	}
}

// firstToEnd is the grant that ends first on this process's clock: the lease's end is its
// end. Called with l.mu held.
func (l *Lease) firstToEnd() kept {
	first := l.kept[0]
	for _, k := range l.kept[1:] {
		if k.until.Before(first.until) {
			first = k
		}
	}
	return first
}

// giveUpAt is when the guard gives up if no renewal succeeds before: the safety margin before
// the first grant ends.
func (l *Lease) giveUpAt() time.Time {
	return l.HeldUntil().Add(-l.terms.margin)
}

// giveUp is why the guard gives up when giveUpAt comes: the cap, if it is what ends the first
// grant to end (no renewal could have moved it), else renewals that failed with last.
func (l *Lease) giveUp(last error) *LostError {
	l.mu.Lock()
	first := l.firstToEnd()
	l.mu.Unlock()
	lost := &LostError{Reason: ReasonNotRenewed, Kind: l.kind, Name: first.grant.Name, Token: first.grant.Token, Cause: last}
	if first.capped() {
		lost.Reason, lost.Cause = ReasonCapReached, nil
	}
	return lost
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// inParallel runs do(0), …, do(n-1) at once, and waits for all of them.
func inParallel(n int, do func(i int)) {
	var wg sync.WaitGroup
	wg.Add(n)
	for i := 0; i < n; i++ {
		go func(i int) {
			defer wg.Done()
			do(i)
		}(i)
	}
	wg.Wait()
}

// detached is a context with the values of another, but neither its deadline nor its
// cancellation: a release must be sent even when the work's context was cancelled.
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detached) Done() <-chan struct{}       { return nil }
func (detached) Err() error                  { return nil }
func (d detached) Value(key any) any         { return d.parent.Value(key) }
