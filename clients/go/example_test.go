package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"fencelock.example/fencelock"
)

func ExampleClient_Lock() {
	ctx := context.Background()
	client, err := fencelock.New(serverURL) // e.g. "http://127.0.0.1:7070"
	if err != nil {
		log.Fatal(err)
	}
	lease, err := client.Lock(ctx, "payment:42", fencelock.TTL(30*time.Second))
	if err != nil {
		log.Fatal(err) // a *fencelock.NotAcquired if another owner holds it
	}
	defer lease.Release(ctx) // with the lease's token, also on a panic

	// Renewed every 10 s in the background. Stop the moment it may be lost: lease.Lost() is
	// closed and lease.Context() cancelled before anyone else can be granted the lock.
	work := time.After(10 * time.Millisecond) // stands for the work, done with lease.Context()
	select {
	case <-lease.Lost():
		fmt.Println("stopping:", lease.Err())
	case <-work:
		fmt.Println("charged payment:42 under a lease with a token:", lease.Token() > 0)
	}
	// Output: charged payment:42 under a lease with a token: true
}

func ExampleNotAcquired() {
	ctx := context.Background()
	client, err := fencelock.New(serverURL)
	if err != nil {
		log.Fatal(err)
	}
	first, err := client.Lock(ctx, "report:daily", fencelock.Owner("cron@host-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer first.Release(ctx)

	// On another host, at the same time: the report is being made already.
	_, err = client.Lock(ctx, "report:daily", fencelock.Owner("cron@host-2"))
	var busy *fencelock.NotAcquired
	switch {
	case errors.As(err, &busy):
		fmt.Println("skipped: held by", busy.Holders[0].Owner)
	case err != nil:
		log.Fatal(err)
	}
	// Output: skipped: held by cron@host-1
}

// account is a protected resource: it keeps the highest fencing token it accepted and refuses
// writes that carry a lower one. In SQL, the check and the write are one statement:
//
//	UPDATE accounts SET balance = $2, fencing_token = $1 WHERE id = $3 AND fencing_token <= $1
//
// (no row changed: a newer lease has written, stop).
type account struct {
	mu      sync.Mutex
	highest uint64
	balance int
}

var errStale = errors.New("refused: a write with a newer fencing token was accepted")

func (a *account) write(token uint64, balance int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if token < a.highest {
		return errStale
	}
	a.highest, a.balance = token, balance
	return nil
}

// The fenced write: every write carries the lease's token, so that a holder whose lease
// ended while it was paused cannot write over the next holder's work.
func ExampleLease_Token() {
	ctx := context.Background()
	client, err := fencelock.New(serverURL)
	if err != nil {
		log.Fatal(err)
	}
	balance := &account{balance: 100}

	a, err := client.Lock(ctx, "account:7", fencelock.Owner("worker-a"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("A writes:", balance.write(a.Token(), 90))
	// A stalls (a GC pause, swap, a network stall) past its lease. Here its lease simply
	// ends, and B gets the lock with a greater token.
	_ = a.Release(ctx)
	b, err := client.Lock(ctx, "account:7", fencelock.Owner("worker-b"))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Release(ctx)
	fmt.Println("B writes:", balance.write(b.Token(), 80))
	fmt.Println("A wakes up and writes:", balance.write(a.Token(), 70))
	fmt.Println("balance:", balance.balance)
	// Output:
	// A writes: <nil>
	// B writes: <nil>
	// A wakes up and writes: refused: a write with a newer fencing token was accepted
	// balance: 80
}

func ExampleClient_LockAll() {
	ctx := context.Background()
	client, err := fencelock.New(serverURL)
	if err != nil {
		log.Fatal(err)
	}
	// Both accounts or neither, waiting up to 10 s for both at once: two transfers naming
	// them in opposite orders never deadlock.
	both, err := client.LockAll(ctx, []string{"account:alice", "account:bob"}, fencelock.Wait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer both.Release(ctx)
	// Each lock has its own token: write each row with the token of its own lock.
	alice, _ := both.TokenOf("account:alice")
	bob, _ := both.TokenOf("account:bob")
	fmt.Println("two locks, two tokens:", alice != bob)
	// Output: two locks, two tokens: true
}

func ExampleClient_Semaphore() {
	ctx := context.Background()
	client, err := fencelock.New(serverURL)
	if err != nil {
		log.Fatal(err)
	}
	// One of at most 2 trainers on the GPUs at once.
	permit, err := client.Semaphore(ctx, "gpu-pool", 2, fencelock.Owner("trainer-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer permit.Release(ctx)
	fmt.Println(permit.Kind(), permit.Name(), "of", permit.Grants()[0].Limit)
	// Output: semaphore gpu-pool of 2
}

func ExampleClient_ReadLock() {
	ctx := context.Background()
	client, err := fencelock.New(serverURL)
	if err != nil {
		log.Fatal(err)
	}
	// Readers share it; a writer (client.WriteLock) waits for all of them.
	read, err := client.ReadLock(ctx, "config", fencelock.Owner("reader-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer read.Release(ctx)
	also, err := client.ReadLock(ctx, "config", fencelock.Owner("reader-2"))
	if err != nil {
		log.Fatal(err)
	}
	defer also.Release(ctx)
	fmt.Println(read.Grants()[0].Mode, "held by two readers")
	// Output: read held by two readers
}
