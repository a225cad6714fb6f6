package fencelock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// kept is one grant a guard keeps, as the server last confirmed it, and how long it surely
// lasts on this process's monotonic clock.
type kept struct {
	grant Grant
	// until: the grant is surely live before this — the send of its last confirmed grant or
	// renewal plus the TTL, cut at its cap.
	until time.Time
	// cap is where its cap on holding falls on this clock, as far as the server's answers
	// show (never later than the server's own hold_until); zero: no cap.
	cap time.Time
}

// grantedKept is g as granted by a request sent at sent that asked for ttl and maxHold.
func grantedKept(g Grant, sent time.Time, ttl, maxHold time.Duration) kept {
	var cap time.Time
	switch {
	case !g.HoldUntil.IsZero():
		// The server measured the cap from acquired_at (the grant, or an extension that
		// kept an earlier cap), which it set to its now: not before the send.
		cap = sent.Add(g.HoldUntil.Sub(g.AcquiredAt))
	case maxHold > 0:
		// A server that keeps no cap: the guard keeps the one asked for, so that the
		// holder never counts on more.
		cap = sent.Add(maxHold)
	}
	return kept{grant: g, until: cut(sent.Add(ttl), cap), cap: cap}
}

// renewed takes in g, renewed for ttl by a request sent at sent.
func (k *kept) renewed(g Grant, sent time.Time, ttl time.Duration) {
	if !g.HoldUntil.IsZero() && g.ExpiresAt.Before(g.HoldUntil) {
		// Not cut at the cap: the server renewed at expires_at - ttl, not before the
		// send, so the cap is at least this far from the send. After a long wait this is
		// far closer than the bound from the grant's send.
		cap := sent.Add(ttl + g.HoldUntil.Sub(g.ExpiresAt))
		if k.cap.IsZero() || cap.After(k.cap) {
			k.cap = cap
		}
	}
	k.until = cut(sent.Add(ttl), k.cap)
	k.grant = g
}

// capped says whether the cap is what ends the grant.
func (k kept) capped() bool { return !k.cap.IsZero() && k.cap.Equal(k.until) }

// cut is until, or the cap if that comes first.
func cut(until, cap time.Time) time.Time {
	if !cap.IsZero() && cap.Before(until) {
		return cap
	}
	return until
}

// errLate is why a lease starts lost when its grant came too late.
var errLate = errors.New("the grant was answered too late: only the safety margin, or less, was left of the lease")

// start starts the guard over granted, granted by a request sent at sent. A grant that came
// late (more than a tenth of the TTL after the send, e.g. after a wait in line) is renewed at
// once, so that the guard counts from that renewal and not from before the wait. If the
// server refuses one of those renewals, that lease ended before it could be confirmed: the
// others are given back (all or none) and the error is a *LostError.
func (c *Client) start(ctx context.Context, kind Kind, granted []Grant, t terms, sent time.Time) (*Lease, error) {
	kept := make([]kept, len(granted))
	for i, g := range granted {
		kept[i] = grantedKept(g, sent, t.ttl, t.maxHold)
	}
	l := newLease(c, kind, kept, t)
	from, failed := sent, errLate
	if time.Since(sent) > t.ttl/10 {
		resent := time.Now()
		results := c.renewAll(ctx, kind, l.granted, t.ttl, c.requestTimeout)
		if err := l.confirmed(ctx, results, resent); err != nil {
			l.cancel()
			return nil, err
		}
		// A grant whose renewal failed may still be ours: it counts from the first send,
		// and the guard renews (or gives up) at once.
		if failed = firstFailure(l.granted, results); failed == nil {
			from, failed = resent, errLate
		}
	}
	var renewalCtx context.Context
	renewalCtx, l.stopRenewal = context.WithCancel(context.Background())
	// The renewal goroutine would notice this too, but only once it runs: until then the
	// lease would say held while it may already be another owner's.
	if !time.Now().Before(l.giveUpAt()) {
		l.lose(l.giveUp(failed), -1)
	}
	go l.keepAlive(renewalCtx, from)
	return l, nil
}

// confirmed takes in the renewals that confirm a late grant, sent at resent. If the server
// refused one, the others are released and the refusal returned.
func (l *Lease) confirmed(ctx context.Context, results []renewal, resent time.Time) error {
	for _, r := range results {
		if r.refused == nil {
			continue
		}
		inParallel(len(l.granted), func(i int) {
			if results[i].refused == nil {
				_ = l.client.release(ctx, l.kind, l.granted[i])
			}
		})
		return r.refused
	}
	l.renewed(results, resent)
	return nil
}

// keepAlive renews every grant every renewEvery from the last confirmed send, all at once,
// retries failures with a growing pause, and declares the lease lost when the server says a
// grant is, or when only the safety margin is left before the first ends. It ends when ctx
// is cancelled (by Release) or the lease is lost.
func (l *Lease) keepAlive(ctx context.Context, sent time.Time) {
	defer close(l.renewalDone)
	every := l.terms.renewEvery
	firstRetry := clamp(every/8, 5*time.Millisecond, 500*time.Millisecond)
	next, retry := sent.Add(every), firstRetry
	var last error
	for l.State() != StateLost {
		giveUpAt := l.giveUpAt()
		if !sleepUntil(ctx, earliest(next, giveUpAt), nil) {
			return
		}
		if !time.Now().Before(giveUpAt) {
			l.lose(l.giveUp(last), -1)
			return
		}
		if paused := l.pausedUntil(); paused != nil {
			last = errors.New("renewal was paused")
			if !sleepUntil(ctx, giveUpAt, paused) {
				return
			}
			continue
		}
		sent := time.Now()
		// A renewal that hangs is a failure like any other, in time to try again.
		full := earliestDuration(l.client.requestTimeout, every)
		timeout := earliestDuration(full, giveUpAt.Sub(sent))
		results := l.client.renewAll(ctx, l.kind, l.granted, l.terms.ttl, timeout)
		if ctx.Err() != nil {
			return
		}
		for i, r := range results {
			if r.refused != nil {
				l.lose(r.refused, i)
				return
			}
		}
		l.renewed(results, sent)
		failure := firstFailure(l.granted, results)
		if failure == nil {
			last, next, retry = nil, sent.Add(every), firstRetry
			continue
		}
		// A renewal cut short by the give-up point says less than the failure before it (a
		// 503, a refused connection): that one stays the reason given.
		if cutShort := timeout < full && errors.Is(failure, context.DeadlineExceeded); last == nil || !cutShort {
			last = failure
		}
		l.failed()
		next = time.Now().Add(retry)
		retry = clamp(retry*2, firstRetry, every/2)
	}
}

// pausedUntil is, while a test has paused renewal, a channel closed when it resumes.
func (l *Lease) pausedUntil() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paused
}

// renewal is the outcome of one renewal: the grant renewed, the server's refusal (the lease
// is not ours any more), or a failure (no answer, another problem) after which it may still
// be.
type renewal struct {
	grant   Grant
	refused *LostError
	err     error
}

// refusals are the problems that say a lease is not the caller's any more. A 403 of another
// type (denied: a right the caller lacks) says nothing of the lease.
var refusals = map[ProblemType]LostReason{
	ProblemNotFound:  ReasonGone,
	ProblemForbidden: ReasonTaken,
	ProblemConflict:  ReasonSuperseded,
}

// renewAll renews every grant at once, each with its token, each waiting at most timeout.
func (c *Client) renewAll(ctx context.Context, kind Kind, granted []Grant, ttl, timeout time.Duration) []renewal {
	results := make([]renewal, len(granted))
	inParallel(len(granted), func(i int) {
		results[i] = c.renew(ctx, kind, granted[i], ttl, timeout)
	})
	return results
}

func (c *Client) renew(ctx context.Context, kind Kind, g Grant, ttl, timeout time.Duration) renewal {
	body := renewBody{Owner: g.Owner, TTLMs: ttl.Milliseconds(), FencingToken: g.Token}
	reply, err := c.call(ctx, "POST", kind.path(g.Name)+"/renew", body, timeout)
	if err != nil {
		return renewal{err: err}
	}
	var renewed grantJSON
	if err := reply.decode(&renewed); err != nil {
		var problem *Problem
		if errors.As(err, &problem) {
			if reason, ok := refusals[problem.Type]; ok {
				return renewal{refused: &LostError{Reason: reason, Kind: kind, Name: g.Name, Token: g.Token, Cause: problem}}
			}
		}
		return renewal{err: err}
	}
	return renewal{grant: renewed.grant()}
}

// firstFailure is the first renewal's failure, naming its lease if there are several.
func firstFailure(granted []Grant, results []renewal) error {
	for i, r := range results {
		if r.err == nil {
			continue
		}
		if len(granted) > 1 {
			return fmt.Errorf("%s: %w", granted[i].Name, r.err)
		}
		return r.err
	}
	return nil
}

// release gives g back, with its token. A lease the server says is gone or another's is not
// an error.
func (c *Client) release(ctx context.Context, kind Kind, g Grant) error {
	body := releaseBody{Owner: g.Owner, FencingToken: g.Token}
	reply, err := c.call(ctx, "DELETE", kind.path(g.Name), body, c.requestTimeout)
	if err != nil {
		return err
	}
	if reply.status == http.StatusNoContent {
		return nil
	}
	problem := reply.problem()
	if _, refused := refusals[problem.Type]; refused {
		return nil
	}
	return problem
}

// sleepUntil waits until at, or until wake is closed (nil: never); false if ctx ended first.
func sleepUntil(ctx context.Context, at time.Time, wake chan struct{}) bool {
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-wake:
	case <-ctx.Done():
		return false
	}
	return true
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func earliestDuration(first time.Duration, others ...time.Duration) time.Duration {
	for _, d := range others {
		if d < first {
			first = d
		}
	}
	return first
}

func clamp(d, least, most time.Duration) time.Duration {
	if d > most {
		d = most
	}
	if d < least {
		d = least
	}
	return d
}
