package fencelock

import (
	"context"
	"encoding/json"
	"time"
)

// Lock acquires the lock name and returns its [Lease], renewed in the background until
// [Lease.Release]:
//
//	lease, err := client.Lock(ctx, "payment:42", fencelock.TTL(30*time.Second))
//	if err != nil {
//		return err // a *NotAcquired if another owner holds it
//	}
//	defer lease.Release(ctx)
//
// If another owner holds it, the error is a [*NotAcquired] (with the holder and how long
// until its lease ends) once the [Wait] ran out: not a failure, nothing was taken. Any
// other error is a [*Problem], a [*RequestError] or an option refused ([ErrInvalidOption]).
//
// ctx bounds the acquire only (its wait included), never the lease: the lease lives until
// Release, or until it is lost. If ctx ends while a waiting acquire is in line, the server
// may still grant it; that lease then ends at its TTL.
func (c *Client) Lock(ctx context.Context, name string, options ...Option) (*Lease, error) {
	return c.acquire(ctx, acquisition{kind: KindLock, names: []string{name}}, options)
}

// LockAll acquires every lock of names, or none, in one request: while any is held by
// another owner it takes none, and with a [Wait] it waits for all of them at once, holding
// none meanwhile (so two callers naming the same locks in opposite orders never deadlock).
// One [Lease] holds them all: renewed together, lost together (as soon as any one is), and
// released together. Each lock keeps its own fencing token ([Lease.TokenOf]).
//
// If some are held by others, the error is a [*NotAcquired] naming every one in the way.
func (c *Client) LockAll(ctx context.Context, names []string, options ...Option) (*Lease, error) {
	return c.acquire(ctx, acquisition{kind: KindLock, names: names, all: true}, options)
}

// Semaphore acquires one permit of the semaphore name, which up to limit owners hold at once.
// The limit travels with the live permits: asking with another limit while they are live is
// a [Problem] of type [ProblemLimitMismatch]. With all permits held, the error is a
// [*NotAcquired] with the permits in the way.
func (c *Client) Semaphore(ctx context.Context, name string, limit int, options ...Option) (*Lease, error) {
	return c.acquire(ctx, acquisition{kind: KindSemaphore, names: []string{name}, limit: limit}, options)
}

// ReadLock acquires the read-write lock name for reading: many readers hold it at once, never
// with a writer. A reader that comes while a writer waits waits behind it.
func (c *Client) ReadLock(ctx context.Context, name string, options ...Option) (*Lease, error) {
	return c.acquire(ctx, acquisition{kind: KindRWLock, names: []string{name}, mode: Read}, options)
}

// WriteLock acquires the read-write lock name for writing: one writer, and no reader.
// This owner's read hold, if it is the only reader, is upgraded (a new hold, with a new
// token).
func (c *Client) WriteLock(ctx context.Context, name string, options ...Option) (*Lease, error) {
	return c.acquire(ctx, acquisition{kind: KindRWLock, names: []string{name}, mode: Write}, options)
}

// acquisition is what one acquire asks for.
type acquisition struct {
	kind  Kind
	names []string
	all   bool // POST /locks: every lock of names, or none
	limit int  // a semaphore's
	mode  Mode // a read-write lock's
}

func (a acquisition) path() string {
	if a.all {
		return "/locks"
	}
	return a.kind.path(a.names[0])
}

func (a acquisition) body(t terms, wait time.Duration) acquireBody {
	body := t.body(wait)
	body.Limit, body.Mode = a.limit, a.mode
	if a.all {
		body.Resources = a.names
	}
	return body
}

// acquire sends the acquisition (as several waiting requests in a row if its wait is longer
// than a request may wait) and starts the lease's guard on what it grants.
func (c *Client) acquire(ctx context.Context, a acquisition, options []Option) (*Lease, error) {
	t, err := newTerms(a.kind, options)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(t.wait)
	for {
		// Whole milliseconds, as sent: the server waits no more.
		wait := time.Until(deadline).Truncate(time.Millisecond)
		if wait < 0 {
			wait = 0
		}
		if wait > c.maxWait {
			wait = c.maxWait
		}
		// The guard counts the lease from the send: the server's grant came after it.
		sent := time.Now()
		reply, err := c.call(ctx, "POST", a.path(), a.body(t, wait), c.requestTimeout+wait)
		if err != nil {
			return nil, err
		}
		var answer acquireAnswer
		if err := reply.decode(&answer); err != nil {
			return nil, err
		}
		if answer.Acquired {
			return c.start(ctx, a.kind, answer.granted(), t, sent)
		}
		// Only a wait that was used up is worth another request: an answer that came
		// sooner is the server's decision (shutting down, no room for another waiter).
		waited := time.Since(sent) >= wait
		if !waited || wait == 0 || time.Until(deadline) <= 0 || answer.ShuttingDown {
			return nil, notAcquired(a, &answer)
		}
	}
}

// notAcquired is what an "acquired": false answer tells of.
func notAcquired(a acquisition, answer *acquireAnswer) *NotAcquired {
	refusal := &NotAcquired{
		Kind:         a.kind,
		Names:        a.names,
		Holders:      grants(answer.Permits),
		Mode:         answer.Mode,
		WriterWaits:  answer.WriterWaits,
		ShuttingDown: answer.ShuttingDown,
	}
	if a.all && answer.Held != nil {
		refusal.Names = answer.Held
	}
	if answer.Holder != nil {
		refusal.Holders = append(refusal.Holders, answer.Holder.grant())
	}
	for _, each := range answer.Refusals {
		if each.Holder != nil {
			refusal.Holders = append(refusal.Holders, each.Holder.grant())
		}
	}
	// "holders" is a semaphore's count of permits, a read-write lock's holds.
	switch a.kind {
	case KindSemaphore:
		_ = json.Unmarshal(answer.Holders, &refusal.Permits)
	case KindRWLock:
		var holds []grantJSON
		if json.Unmarshal(answer.Holders, &holds) == nil {
			refusal.Holders = append(refusal.Holders, grants(holds)...)
		}
	}
	for _, ms := range []*int64{answer.ExpiresInMs, answer.RetryInMs, answer.RetryAfterMs} {
		if ms != nil {
			refusal.RetryIn = time.Duration(*ms) * time.Millisecond
			break
		}
	}
	return refusal
}
