package fencelock_test

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"fencelock.example/fencelock"
)

// owners are the owners of grants, sorted.
func owners(grants []fencelock.Grant) string {
	var names []string
	for _, g := range grants {
		names = append(names, g.Owner)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// notAcquired is err as a *NotAcquired, failing t if it is not one.
func notAcquired(t *testing.T, lease *fencelock.Lease, err error) *fencelock.NotAcquired {
	t.Helper()
	var busy *fencelock.NotAcquired
	if lease != nil || !errors.As(err, &busy) {
		t.Fatalf("got %v, %v; want a *NotAcquired", lease, err)
	}
	return busy
}

func TestASemaphoreHasUpToItsLimitOfHolders(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	ctx := context.Background()
	permit := func(owner string, limit int) (*fencelock.Lease, error) {
		return client.Semaphore(ctx, "gpu-pool", limit, fencelock.Owner(owner))
	}
	first, err := permit("trainer-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	second, err := permit("trainer-2", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	if first.Token() == second.Token() || second.Grants()[0].Limit != 2 || second.Kind() != fencelock.KindSemaphore {
		t.Fatalf("permits %+v and %+v", first.Grants(), second.Grants())
	}

	third, err := permit("trainer-3", 2)
	busy := notAcquired(t, third, err)
	if busy.Permits != 2 || owners(busy.Holders) != "trainer-1,trainer-2" || busy.RetryIn <= 0 {
		t.Fatalf("not acquired: %+v", busy)
	}

	// The limit travels with the live permits: another is a problem, not "not acquired".
	_, err = permit("trainer-3", 3)
	var problem *fencelock.Problem
	if !errors.As(err, &problem) || problem.Type != fencelock.ProblemLimitMismatch || problem.Status != http.StatusConflict || problem.Limit != 2 {
		t.Fatalf("another limit: %v", err)
	}

	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	third, err = permit("trainer-3", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Release(ctx)
	if third.Token() <= second.Token() {
		t.Fatalf("the third permit's token %d is not above %d", third.Token(), second.Token())
	}
}

func TestReadersShareAReadWriteLockAndAWriterExcludesThem(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	ctx := context.Background()
	reader1, err := client.ReadLock(ctx, "config", fencelock.Owner("reader-1"))
	if err != nil {
		t.Fatal(err)
	}
	reader2, err := client.ReadLock(ctx, "config", fencelock.Owner("reader-2"))
	if err != nil {
		t.Fatal(err)
	}
	if reader1.Grants()[0].Mode != fencelock.Read || reader2.Token() <= reader1.Token() {
		t.Fatalf("read holds %+v, %+v", reader1.Grants(), reader2.Grants())
	}

	writer, err := client.WriteLock(ctx, "config", fencelock.Owner("writer"))
	busy := notAcquired(t, writer, err)
	if busy.Mode != fencelock.Read || owners(busy.Holders) != "reader-1,reader-2" || busy.Kind != fencelock.KindRWLock {
		t.Fatalf("not acquired: %+v", busy)
	}

	// The writer waits in line; the readers leave; it is granted.
	granted := make(chan *fencelock.Lease, 1)
	go func() {
		lease, err := client.WriteLock(ctx, "config", fencelock.Owner("writer"), fencelock.Wait(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		granted <- lease
	}()
	eventually(t, 10*time.Second, "the writer waits in line", func() bool {
		return metric(t, s, "fencelock_waiters") == "1"
	})
	// While it waits, a new reader waits behind it: not granted.
	late, err := client.ReadLock(ctx, "config", fencelock.Owner("reader-3"))
	if busy := notAcquired(t, late, err); !busy.WriterWaits {
		t.Fatalf("a reader coming while a writer waits: %+v", busy)
	}
	for _, reader := range []*fencelock.Lease{reader1, reader2} {
		if err := reader.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	writer = <-granted
	if writer == nil {
		t.FailNow()
	}
	defer writer.Release(ctx)
	if writer.Grants()[0].Mode != fencelock.Write || writer.Token() <= reader2.Token() {
		t.Fatalf("write hold %+v", writer.Grants())
	}
	reader, err := client.ReadLock(ctx, "config", fencelock.Owner("reader-1"))
	if busy := notAcquired(t, reader, err); busy.Mode != fencelock.Write || owners(busy.Holders) != "writer" {
		t.Fatalf("a reader while the writer holds it: %+v", busy)
	}
}

func TestSeveralLocksAreTakenAllOrNone(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	ctx := context.Background()
	bob := lock(t, client, "account:bob", "clerk-2")

	both, err := client.LockAll(ctx, []string{"account:alice", "account:bob"}, fencelock.Owner("clerk-1"))
	busy := notAcquired(t, both, err)
	if strings.Join(busy.Names, ",") != "account:bob" || owners(busy.Holders) != "clerk-2" || busy.RetryIn <= 0 {
		t.Fatalf("not acquired: %+v", busy)
	}
	// Nothing was taken: alice is free.
	if status, _ := raw(t, "GET", s.URL+"/locks/account:alice", "", nil); status != http.StatusNotFound {
		t.Fatalf("alice after all-or-none refused: GET %d", status)
	}

	if err := bob.Release(ctx); err != nil {
		t.Fatal(err)
	}
	both, err = client.LockAll(ctx, []string{"account:alice", "account:bob"}, fencelock.Owner("clerk-1"))
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := both.TokenOf("account:alice")
	bobs, _ := both.TokenOf("account:bob")
	if alice == 0 || bobs <= bob.Token() || alice == bobs {
		t.Fatalf("tokens alice %d, bob %d (bob's before %d)", alice, bobs, bob.Token())
	}
	if _, held := both.TokenOf("account:carol"); held {
		t.Fatal("a token for a lock not held")
	}
	if err := both.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"account:alice", "account:bob"} {
		if status, _ := raw(t, "GET", s.URL+"/locks/"+name, "", nil); status != http.StatusNotFound {
			t.Fatalf("%s after the release: GET %d", name, status)
		}
	}
}

func TestSeveralLocksAreLostTogetherAndTheRestReleased(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	ctx := context.Background()
	both, err := client.LockAll(ctx, []string{"account:alice", "account:bob"}, fencelock.Owner("clerk"), fencelock.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer both.Release(ctx)
	// Behind the guard's back, bob's lease is released: its next renewal is refused (404).
	bob, _ := both.TokenOf("account:bob")
	if status, _ := raw(t, "DELETE", s.URL+"/locks/account:bob", "", map[string]any{"owner": "clerk", "fencing_token": bob}); status != http.StatusNoContent {
		t.Fatalf("releasing bob: %d", status)
	}
	closedWithin(t, both.Lost(), 5*time.Second, "both are lost once bob's renewal is refused")
	var lost *fencelock.LostError
	if !errors.As(both.Err(), &lost) || lost.Reason != fencelock.ReasonGone || lost.Name != "account:bob" || lost.Token != bob || both.Context().Err() == nil {
		t.Fatalf("lost: %v", both.Err())
	}
	// Alice is still held until the release gives it back.
	if status, _ := raw(t, "GET", s.URL+"/locks/account:alice", "", nil); status != http.StatusOK {
		t.Fatalf("alice before the release: GET %d", status)
	}
	if err := both.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if status, _ := raw(t, "GET", s.URL+"/locks/account:alice", "", nil); status != http.StatusNotFound {
		t.Fatalf("alice after the release: GET %d", status)
	}
}
