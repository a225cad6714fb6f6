package fencelock

import (
	"encoding/json"
	"net/url"
	"time"
)

// Kind is the namespace a lease is held in. Locks, semaphores and read-write locks are three
// separate namespaces: the lock "x", the semaphore "x" and the read-write lock "x" are
// unrelated.
type Kind string

// The kinds of lease.
const (
	KindLock      Kind = "lock"      // a lock: one holder at a time
	KindSemaphore Kind = "semaphore" // a permit of a semaphore: up to its limit of holders
	KindRWLock    Kind = "rwlock"    // a read or write hold of a read-write lock
)

// path is where a name of this kind lives on the server, e.g. /locks/payment:42.
func (k Kind) path(name string) string {
	collection := "/locks/"
	switch k {
	case KindSemaphore:
		collection = "/semaphores/"
	case KindRWLock:
		collection = "/rwlocks/"
	}
	// PathEscape turns a "/" in the name into %2F: the name is one path segment.
	return collection + url.PathEscape(name)
}

// Mode is how a read-write lock is held: by any number of readers, or by one writer.
type Mode string

// The modes of a read-write lock.
const (
	Read  Mode = "read"
	Write Mode = "write"
)

// Grant is one lease as the server last told of it: a lock's lease, a semaphore's permit or
// a read-write lock's hold. Each has its own fencing token.
//
// AcquiredAt, ExpiresAt and HoldUntil are the server's wall clock, for people and logs; the
// guard never decides anything by them (see [Lease.HeldUntil]).
type Grant struct {
	Name       string    // the lock's resource, or the semaphore's or read-write lock's name
	Owner      string    // who holds it
	Principal  string    // on a server with authentication: the principal that took it
	Token      uint64    // the fencing token: pass it to the protected resource with every write
	AcquiredAt time.Time // when the lease with this token was granted (or last extended)
	ExpiresAt  time.Time // when it ends unless renewed
	HoldUntil  time.Time // the cap on holding (see [MaxHold]); zero when it has none
	Limit      int       // a permit: the semaphore's limit
	Mode       Mode      // a hold: read or write
}

// grantJSON is a lease, permit or hold as the server writes it: a lock's names itself
// "resource", the others "name".
type grantJSON struct {
	Resource     string     `json:"resource"`
	Name         string     `json:"name"`
	Owner        string     `json:"owner"`
	Principal    string     `json:"principal"`
	FencingToken uint64     `json:"fencing_token"`
	AcquiredAt   time.Time  `json:"acquired_at"`
	ExpiresAt    time.Time  `json:"expires_at"`
	HoldUntil    *time.Time `json:"hold_until"`
	Limit        int        `json:"limit"`
	Mode         Mode       `json:"mode"`
}

func (g grantJSON) grant() Grant {
	name := g.Resource
	if name == "" {
		name = g.Name
	}
	var holdUntil time.Time
	if g.HoldUntil != nil {
		holdUntil = *g.HoldUntil
	}
	return Grant{
		Name:       name,
		Owner:      g.Owner,
		Principal:  g.Principal,
		Token:      g.FencingToken,
		AcquiredAt: g.AcquiredAt,
		ExpiresAt:  g.ExpiresAt,
		HoldUntil:  holdUntil,
		Limit:      g.Limit,
		Mode:       g.Mode,
	}
}

func grants(all []grantJSON) []Grant {
	out := make([]Grant, len(all))
	for i, g := range all {
		out[i] = g.grant()
	}
	return out
}

// acquireBody is the body of every acquire: POST /locks/{name}, /semaphores/{name},
// /rwlocks/{name}, and POST /locks with "resources".
type acquireBody struct {
	Owner     string   `json:"owner"`
	TTLMs     int64    `json:"ttl_ms"`
	WaitMs    int64    `json:"wait_ms,omitempty"`
	MaxHoldMs int64    `json:"max_hold_ms,omitempty"`
	Limit     int      `json:"limit,omitempty"`
	Mode      Mode     `json:"mode,omitempty"`
	Resources []string `json:"resources,omitempty"`
}

// acquireAnswer is every 200 answer to an acquire, granted or not, of every kind: the
// fields of one kind are absent from the others'.
type acquireAnswer struct {
	Acquired bool `json:"acquired"`

	// Granted: the lease of a lock, a permit, a hold, or the locks of POST /locks.
	Lock   *grantJSON  `json:"lock"`
	Permit *grantJSON  `json:"permit"`
	Hold   *grantJSON  `json:"hold"`
	Locks  []grantJSON `json:"locks"`

	// Not granted.
	Holder       *grantJSON      `json:"holder"`  // a lock's holder
	Permits      []grantJSON     `json:"permits"` // a semaphore's permits
	Holders      json.RawMessage `json:"holders"` // a semaphore's count, or a read-write lock's holds
	Mode         Mode            `json:"mode"`    // the mode a read-write lock is held in
	WriterWaits  bool            `json:"writer_waits"`
	Held         []string        `json:"held"`     // POST /locks: the names held by others
	Refusals     []acquireAnswer `json:"refusals"` // POST /locks: why each of them is
	ExpiresInMs  *int64          `json:"expires_in_ms"`
	RetryInMs    *int64          `json:"retry_in_ms"`
	RetryAfterMs *int64          `json:"retry_after_ms"`
	ShuttingDown bool            `json:"shutting_down"`
}

// granted is what an answer with "acquired": true grants, in the order asked for.
func (a *acquireAnswer) granted() []Grant {
	for _, one := range []*grantJSON{a.Lock, a.Permit, a.Hold} {
		if one != nil {
			return []Grant{one.grant()}
		}
	}
	return grants(a.Locks)
}

// renewBody is the body of POST …/renew.
type renewBody struct {
	Owner        string `json:"owner"`
	TTLMs        int64  `json:"ttl_ms"`
	FencingToken uint64 `json:"fencing_token"`
}

// releaseBody is the body of DELETE /locks/{name} (and of the other kinds).
type releaseBody struct {
	Owner        string `json:"owner"`
	FencingToken uint64 `json:"fencing_token"`
}
