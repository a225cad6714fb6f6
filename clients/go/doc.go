// Package fencelock is the Go client of fencelock, a lock service that hands out leases with
// fencing tokens over HTTP. It holds a lease safely: renewed in the background, a signal
// when the lease may be lost that comes before anyone else can be granted it, and a release
// with the lease's token.
//
//	client, err := fencelock.New("http://127.0.0.1:7070")
//	if err != nil {
//		return err
//	}
//	lease, err := client.Lock(ctx, "payment:42", fencelock.TTL(30*time.Second))
//	if err != nil {
//		return err // a *fencelock.NotAcquired if another owner holds it
//	}
//	defer lease.Release(ctx)                      // with its fencing token, also on a panic
//	return charge(lease.Context(), lease.Token()) // cancelled if the lease is lost
//
// # Layout
//
//   - client.go: [Client], [New] and its options; one HTTP request and the reading of its answer.
//   - acquire.go: the kinds — [Client.Lock], [Client.LockAll], [Client.Semaphore],
//     [Client.ReadLock], [Client.WriteLock] — and waits longer than one request.
//   - options.go: an acquire's options: [TTL], [Wait], [MaxHold], [Owner], the guard's timing.
//   - lease.go: [Lease], the guard: its state, [Lease.Lost], [Lease.Context], [Lease.Release].
//   - renew.go: the guard's clock, its renewals and when it gives up.
//   - errors.go: [Problem], [NotAcquired], [LostError], [RequestError].
//   - wire.go: [Grant], [Kind], [Mode] and the JSON of the API.
//
// # Outcomes and errors
//
// An acquire returns a [*Lease], or an error:
//   - [*NotAcquired]: "acquired": false — another owner holds it (who, and for how long).
//     Not a failure: nothing was taken. Tell it apart with errors.As or
//     errors.Is(err, ErrNotAcquired).
//   - [*Problem]: any problem+json answer, with its Type, Status, Title, Detail (and Errors
//     for a 422). Tell problems apart by Type, never by status alone.
//   - [*RequestError]: no answer (unreachable, TLS, timeout).
//
// After a 503 problem or a [*RequestError] the outcome is unknown (errors.Is(err,
// ErrOutcomeUnknown)): the server may or may not have done it. A retried acquire by the same
// owner is safe (it extends); read the lease before retrying a release.
//
// The behaviour every fencelock client keeps (Rust, Python, TypeScript, Go) is written once in
// the repository's docs/CLIENTS.md; the HTTP contract is docs/SPEC.md.
package fencelock
