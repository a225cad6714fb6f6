package fencelock

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrOutcomeUnknown is matched (with [errors.Is]) by every error after which the server may
// or may not have done what was asked: a 503 [Problem] (its store did not answer in time,
// and may still have committed) and a [RequestError] (no answer at all). A retried acquire
// by the same owner is safe (it extends); read the lease before retrying a release.
var ErrOutcomeUnknown = errors.New("fencelock: the outcome is unknown")

// ErrNotAcquired is matched (with [errors.Is]) by a [*NotAcquired].
var ErrNotAcquired = errors.New("fencelock: not acquired")

// ErrInvalidOption is matched (with [errors.Is]) by the error of a call whose options are
// refused before anything is sent: a TTL under a millisecond, a cap on holding no longer
// than the safety margin, guard timings that leave no time to renew.
var ErrInvalidOption = errors.New("fencelock: invalid option")

// ErrReleased is what [Lease.Err] says once the lease was given back by [Lease.Release].
var ErrReleased = errors.New("fencelock: the lease was released")

// ProblemType names the kind of a [Problem]. Problems are told apart by type, never by
// status alone: a 409 is a [ProblemConflict], a [ProblemLimitMismatch] or a [ProblemDeadlock].
type ProblemType string

// The problem types a fencelock server answers with.
const (
	ProblemBadRequest      ProblemType = "urn:fencelock:problem:bad-request"            // 400: the body is not a JSON object
	ProblemUnauthorized    ProblemType = "urn:fencelock:problem:unauthorized"           // 401: no bearer token, or an unknown one
	ProblemForbidden       ProblemType = "urn:fencelock:problem:forbidden"              // 403: the lease is another owner's (or principal's)
	ProblemDenied          ProblemType = "urn:fencelock:problem:denied"                 // 403: the principal lacks the right on that name
	ProblemNotFound        ProblemType = "urn:fencelock:problem:not-found"              // 404: no live lease
	ProblemConflict        ProblemType = "urn:fencelock:problem:conflict"               // 409: the fencing token is not the current lease's
	ProblemLimitMismatch   ProblemType = "urn:fencelock:problem:limit-mismatch"         // 409: the semaphore's live permits have another limit
	ProblemDeadlock        ProblemType = "urn:fencelock:problem:deadlock"               // 409: the wait would close a cycle of waiters
	ProblemTooLarge        ProblemType = "urn:fencelock:problem:payload-too-large"      // 413
	ProblemMediaType       ProblemType = "urn:fencelock:problem:unsupported-media-type" // 415
	ProblemInvalidFields   ProblemType = "urn:fencelock:problem:invalid-fields"         // 422: see Problem.Errors
	ProblemTooManyRequests ProblemType = "urn:fencelock:problem:too-many-requests"      // 429: see Problem.RetryAfter
	ProblemUnavailable     ProblemType = "urn:fencelock:problem:store-unavailable"      // 503: the outcome is unknown
)

// Problem is an RFC 9457 problem (application/problem+json) the server answered with. An
// answer that is no problem at all (say a proxy's error page) is one too, of type
// "about:blank", with its status.
type Problem struct {
	Type     ProblemType  `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail"`
	Instance string       `json:"instance"`
	Errors   []FieldError `json:"errors,omitempty"` // a 422: every invalid field
	Limit    int          `json:"limit,omitempty"`  // a limit mismatch: the live permits' limit

	// RetryAfter is the answer's Retry-After (a 429's), zero when it has none.
	RetryAfter time.Duration `json:"-"`
}

// FieldError is one invalid field of a request, as a 422 [Problem] lists it.
type FieldError struct {
	Field   string `json:"field"`   // e.g. "owner", "ttl_ms", "resource" (the name in the path)
	Message string `json:"message"` // e.g. "must not be empty or blank"
}

// Error is the problem in one line: every invalid field if it lists them, else its detail.
func (p *Problem) Error() string {
	what := p.Detail
	if len(p.Errors) > 0 {
		fields := make([]string, len(p.Errors))
		for i, e := range p.Errors {
			fields[i] = e.Field + ": " + e.Message
		}
		what = strings.Join(fields, "; ")
	}
	if what == "" {
		what = p.Title
	}
	return fmt.Sprintf("fencelock: %s (%d %s)", what, p.Status, p.Type)
}

// Is makes errors.Is(err, ErrOutcomeUnknown) true for a 503.
func (p *Problem) Is(target error) bool {
	return target == ErrOutcomeUnknown && p.Status == 503
}

// RequestError is a request that got no answer from the server: it could not be reached, the
// TLS handshake failed, the answer did not come in time or was cut off. The server may
// still have carried the request out: errors.Is(err, ErrOutcomeUnknown) is true.
type RequestError struct {
	Method string // e.g. "POST"
	URL    string // the request's URL
	Err    error  // what failed, e.g. a *net.OpError or context.DeadlineExceeded
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("fencelock: %s %s: no answer: %v", e.Method, e.URL, e.Err)
}

// Unwrap gives what failed.
func (e *RequestError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *RequestError) Is(target error) bool { return target == ErrOutcomeUnknown }

// NotAcquired is the answer "acquired": false: another owner holds what was asked for (or a
// lock-delay keeps it closed) and the wait, if any, ran out. Nothing failed and nothing was
// taken; it is returned as the error of an acquire so that no [Lease] exists for it. Tell it
// from a failure with errors.As (or errors.Is(err, ErrNotAcquired)); it is never a
// [Problem].
type NotAcquired struct {
	Kind Kind
	// Names are the names asked for that are held by others: one, or for [Client.LockAll]
	// every name in the way.
	Names []string
	// Holders are the leases in the way, as far as the server shows them: a lock's holder,
	// a semaphore's permits, a read-write lock's holds (none during a lock-delay).
	Holders []Grant
	// Permits is how many permits of the semaphore are held.
	Permits int
	// Mode is the mode the read-write lock is held in.
	Mode Mode
	// WriterWaits says that a writer waits for the read-write lock: readers that come now
	// wait behind it.
	WriterWaits bool
	// RetryIn is how long until the first lease in the way ends (or the lock-delay does),
	// from when the server answered; zero if the server did not say.
	RetryIn time.Duration
	// ShuttingDown says that the server answered a waiting acquire because it is shutting
	// down: nothing was acquired, and who holds the name is unknown.
	ShuttingDown bool
}

func (e *NotAcquired) Error() string {
	what := fmt.Sprintf("fencelock: not acquired: the %s %s", e.Kind, strings.Join(e.Names, ", "))
	if e.ShuttingDown {
		return what + ": the server is shutting down"
	}
	var owners []string
	for _, h := range e.Holders {
		owners = append(owners, h.Owner)
	}
	switch {
	case e.Kind == KindSemaphore:
		what += fmt.Sprintf(" has all its %d permits held", e.Permits)
	case e.Kind == KindRWLock:
		what += fmt.Sprintf(" is held for %s", e.Mode)
	default:
		what += " is held"
	}
	if len(owners) > 0 {
		what += " by " + strings.Join(owners, ", ")
	}
	if e.RetryIn > 0 {
		what += fmt.Sprintf(" for %v more", e.RetryIn)
	}
	return what
}

// Is makes errors.Is(err, ErrNotAcquired) true.
func (e *NotAcquired) Is(target error) bool { return target == ErrNotAcquired }

// LostReason says why a lease is lost.
type LostReason int

// Why a lease is lost. The first three are the server's refusal of a renewal; the last two
// are the guard's own conclusion.
const (
	// ReasonGone: no live lease (404): it expired, or an administrator force-released it.
	ReasonGone LostReason = iota + 1
	// ReasonTaken: another owner or principal holds it now (403).
	ReasonTaken
	// ReasonSuperseded: this owner holds a newer lease, with another fencing token (409).
	ReasonSuperseded
	// ReasonNotRenewed: renewals kept failing until only the safety margin was left, or
	// the grant came so late that no more than that was left of it.
	ReasonNotRenewed
	// ReasonCapReached: only the safety margin is left before the cap on holding
	// ([MaxHold]), which no renewal can pass.
	ReasonCapReached
)

func (r LostReason) String() string {
	switch r {
	case ReasonGone:
		return "the lease is gone: it expired or was force-released"
	case ReasonTaken:
		return "the lease was taken by another owner"
	case ReasonSuperseded:
		return "this owner holds a newer lease"
	case ReasonNotRenewed:
		return "the lease could not be renewed in time"
	case ReasonCapReached:
		return "the lease reached its cap on holding"
	}
	return fmt.Sprintf("LostReason(%d)", int(r))
}

// LostError is why a lease is lost: [Lease.Err] once [Lease.Lost] is closed, or the error
// of an acquire whose late grant the server refused to confirm.
type LostError struct {
	Reason LostReason
	Kind   Kind
	Name   string // the lease lost (for several locks: the one that was)
	Token  uint64 // its fencing token
	// Cause is the server's refusal (a *Problem) for the first three reasons, the last
	// renewal's failure for ReasonNotRenewed (nil if none was tried).
	Cause error
}

func (e *LostError) Error() string {
	what := fmt.Sprintf("fencelock: the %s %s (token %d) is lost: %s", e.Kind, e.Name, e.Token, e.Reason)
	if e.Cause != nil {
		what += ": " + strings.TrimPrefix(e.Cause.Error(), "fencelock: ")
	}
	return what
}

// Unwrap gives the cause.
func (e *LostError) Unwrap() error { return e.Cause }
