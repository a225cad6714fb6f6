package fencelock

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Option is an option of an acquire: [TTL], [Wait], [MaxHold], [Owner], and the guard's
// timing ([RenewEvery], [SafetyMargin]).
type Option func(*terms)

// terms are an acquire's options, defaults filled in.
type terms struct {
	ttl        time.Duration
	wait       time.Duration
	maxHold    time.Duration
	owner      string
	renewEvery time.Duration
	margin     time.Duration
}

// TTL is how long the lease lasts from each grant or renewal if it is not renewed (default
// 30 s), in whole milliseconds (less is cut). The guard renews it every third of this.
func TTL(d time.Duration) Option {
	return func(t *terms) { t.ttl = d.Truncate(time.Millisecond) }
}

// Wait makes the acquire wait up to d for a name held by others, in line on the server, first
// come first served (default 0: answer at once). A wait longer than the client's
// [WithMaxWaitPerRequest] is sent as several waiting requests in a row.
func Wait(d time.Duration) Option {
	return func(t *terms) { t.wait = d.Truncate(time.Millisecond) }
}

// MaxHold caps the lease (locks only): no renewal keeps it past d from its grant (the
// lease's [Grant.HoldUntil]). The guard counts the cap as the lease's end, and the lease is
// lost ([ReasonCapReached]) a safety margin before it. For jobs of unknown length that must
// not keep a lock forever.
func MaxHold(d time.Duration) Option {
	return func(t *terms) { t.maxHold = d.Truncate(time.Millisecond) }
}

// Owner names the holder. The same owner acquiring a name it holds extends its lease (same
// token): give one owner to several acquires only where that is meant. Without it, every
// acquire is an owner of its own, "HOST:PID:N" (N counted per process), so that two
// goroutines of one process exclude each other as two processes do; the requests of one
// acquire (a long wait sent as several) share it.
func Owner(name string) Option {
	return func(t *terms) { t.owner = name }
}

// RenewEvery sets how often the guard renews (default a third of the TTL, so that two
// renewals can fail before the safety margin is reached).
func RenewEvery(d time.Duration) Option {
	return func(t *terms) { t.renewEvery = d }
}

// SafetyMargin sets how long before the lease surely ends the guard gives up on renewing
// and declares it lost (default a fifth of the TTL): the holder's time to stop before anyone
// else can be granted the name. It also absorbs the drift between this machine's clock rate
// and the server's.
func SafetyMargin(d time.Duration) Option {
	return func(t *terms) { t.margin = d }
}

// newTerms applies options over the defaults and checks them, for an acquire of kind.
func newTerms(kind Kind, options []Option) (terms, error) {
	t := terms{ttl: 30 * time.Second}
	for _, option := range options {
		option(&t)
	}
	if t.owner == "" {
		t.owner = defaultOwner()
	}
	if t.renewEvery == 0 {
		t.renewEvery = t.ttl / 3
	}
	if t.margin == 0 {
		t.margin = t.ttl / 5
	}
	switch {
	case t.ttl < time.Millisecond:
		return t, invalidOption("the TTL %v is under a millisecond", t.ttl)
	case t.wait < 0:
		return t, invalidOption("the wait %v is negative", t.wait)
	case t.renewEvery <= 0 || t.margin < 0 || t.renewEvery+t.margin >= t.ttl:
		// A renewal must be due before the lease is declared lost, or the guard would
		// only ever run out its first grant.
		return t, invalidOption("renewing every %v with a safety margin of %v leaves no time to renew a lease of %v: their sum must be below the TTL",
			t.renewEvery, t.margin, t.ttl)
	case t.maxHold != 0 && kind != KindLock:
		return t, invalidOption("a cap on holding (MaxHold) is for locks only, not a %s", kind)
	case t.maxHold < 0 || (t.maxHold != 0 && t.maxHold <= t.margin):
		// The guard would be lost the moment it starts.
		return t, invalidOption("the cap on holding %v is not longer than the safety margin %v", t.maxHold, t.margin)
	}
	return t, nil
}

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("fencelock: %w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
}

// acquiresWithoutOwner counts the acquires of this process made without an [Owner].
var acquiresWithoutOwner atomic.Uint64

// defaultOwner is "HOST:PID:N", new for every acquire: it says where the holder runs, and
// two goroutines acquiring as one owner would both hold the lock (the second acquire would
// extend the first's lease, with the same token).
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s:%d:%d", host, os.Getpid(), acquiresWithoutOwner.Add(1))
}

// body is the acquire's body, waiting up to wait.
func (t terms) body(wait time.Duration) acquireBody {
	return acquireBody{
		Owner:     t.owner,
		TTLMs:     t.ttl.Milliseconds(),
		WaitMs:    wait.Milliseconds(),
		MaxHoldMs: t.maxHold.Milliseconds(),
	}
}
