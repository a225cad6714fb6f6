package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"fencelock.example/fencelock"
)

func TestEveryKindIsRenewedInTheBackgroundAndReleased(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	ttl := time.Second
	cases := []struct {
		kind    fencelock.Kind
		names   []string
		acquire func(ctx context.Context, options ...fencelock.Option) (*fencelock.Lease, error)
	}{
		// A "/" in a name is part of the name: it travels as %2F.
		{fencelock.KindLock, []string{"reports/2026:q4"}, func(ctx context.Context, o ...fencelock.Option) (*fencelock.Lease, error) {
			return client.Lock(ctx, "reports/2026:q4", o...)
		}},
		{fencelock.KindSemaphore, []string{"gpu"}, func(ctx context.Context, o ...fencelock.Option) (*fencelock.Lease, error) {
			return client.Semaphore(ctx, "gpu", 2, o...)
		}},
		{fencelock.KindRWLock, []string{"config"}, func(ctx context.Context, o ...fencelock.Option) (*fencelock.Lease, error) {
			return client.ReadLock(ctx, "config", o...)
		}},
		{fencelock.KindRWLock, []string{"schema"}, func(ctx context.Context, o ...fencelock.Option) (*fencelock.Lease, error) {
			return client.WriteLock(ctx, "schema", o...)
		}},
		{fencelock.KindLock, []string{"account:1", "account:2"}, func(ctx context.Context, o ...fencelock.Option) (*fencelock.Lease, error) {
			return client.LockAll(ctx, []string{"account:1", "account:2"}, o...)
		}},
	}
	for _, tc := range cases {
		tc := tc
		t.Run(strings.Join(tc.names, "+"), func(t *testing.T) {
			t.Parallel() // each on names of its own
			lease, err := tc.acquire(context.Background(), fencelock.Owner("worker-7"), fencelock.TTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			granted := lease.Grants()
			if lease.Kind() != tc.kind || lease.Owner() != "worker-7" || len(granted) != len(tc.names) {
				t.Fatalf("granted %v %+v", lease.Kind(), granted)
			}
			for i, g := range granted {
				if token, _ := lease.TokenOf(tc.names[i]); g.Name != tc.names[i] || g.Token == 0 || token != g.Token {
					t.Fatalf("grant %d is %+v, its token %d", i, g, token)
				}
			}
			// The server's expires_at of every grant moves three TTLs on, tokens unchanged.
			for _, g := range granted {
				eventually(t, 10*time.Second, g.Name+" renewed three TTLs on", func() bool {
					shown := shownGrant(t, s, tc.kind, g.Name, g.Token)
					return shown != nil && shown.ExpiresAt.Sub(g.ExpiresAt) >= 3*ttl
				})
			}
			if lease.State() != fencelock.StateHeld || isClosed(lease.Lost()) || lease.Err() != nil || lease.Context().Err() != nil {
				t.Fatalf("held for three TTLs, the lease says %v, %v", lease.State(), lease.Err())
			}

			if err := lease.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, g := range granted {
				if shownGrant(t, s, tc.kind, g.Name, g.Token) != nil {
					t.Fatalf("after the release, the server still shows %s", g.Name)
				}
			}
			if !isClosed(lease.Lost()) || !errors.Is(lease.Err(), fencelock.ErrReleased) || lease.Context().Err() == nil {
				t.Fatalf("released, the lease says %v, %v", lease.State(), lease.Err())
			}
			if err := lease.Release(context.Background()); err != nil {
				t.Fatalf("a second release: %v", err)
			}
		})
	}
}

// shownGrant is the live lease, permit or hold with token on name, as the server's GET shows
// it (nil if there is none).
func shownGrant(t *testing.T, s *server, kind fencelock.Kind, name string, token uint64) *fencelock.Grant {
	t.Helper()
	path := map[fencelock.Kind]string{fencelock.KindLock: "/locks/", fencelock.KindSemaphore: "/semaphores/", fencelock.KindRWLock: "/rwlocks/"}[kind]
	status, body := raw(t, "GET", s.URL+path+url.PathEscape(name), "", nil)
	if status == http.StatusNotFound {
		return nil
	}
	// A lock's GET is its lease; a semaphore's lists its permits, a read-write lock's its holds.
	shown := []any{body}
	for _, list := range []string{"permits", "holders"} {
		if many, ok := body[list].([]any); ok {
			shown = many
		}
	}
	for _, each := range shown {
		lease := each.(map[string]any)
		if lease["fencing_token"] == float64(token) {
			expires, _ := time.Parse(time.RFC3339, lease["expires_at"].(string))
			return &fencelock.Grant{Name: name, Owner: lease["owner"].(string), Token: token, ExpiresAt: expires}
		}
	}
	return nil
}

func TestTheLeaseIsReleasedOnEveryWayOutOfTheBlock(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	cases := []struct {
		name string
		// work runs under the lease; cancel cancels its context.
		work func(lease *fencelock.Lease, cancel context.CancelFunc) error
	}{
		{"return", func(*fencelock.Lease, context.CancelFunc) error { return nil }},
		{"error", func(*fencelock.Lease, context.CancelFunc) error { return io.ErrUnexpectedEOF }},
		{"panic", func(*fencelock.Lease, context.CancelFunc) error { panic("the work failed") }},
		{"cancel", func(_ *fencelock.Lease, cancel context.CancelFunc) error {
			cancel()
			return context.Canceled
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "job:" + tc.name
			var token uint64
			func() {
				defer func() { _ = recover() }()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				lease, err := client.Lock(ctx, name, fencelock.Owner("worker"), fencelock.TTL(30*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer lease.Release(ctx)
				token = lease.Token()
				_ = tc.work(lease, cancel)
			}()
			if status, _ := raw(t, "GET", s.URL+"/locks/"+name, "", nil); status != http.StatusNotFound {
				t.Fatalf("after the block, GET answers %d, not 404", status)
			}
			next := lock(t, client, name, "another")
			defer next.Release(context.Background())
			if next.Token() <= token {
				t.Fatalf("the next token %d is not above %d", next.Token(), token)
			}
		})
	}
}

func TestALateReleaseCarriesItsTokenAndFreesNoNewerLease(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	old := lock(t, client, "report", "worker", fencelock.TTL(time.Second))
	fencelock.PauseRenewal(old)
	closedWithin(t, old.Lost(), 5*time.Second, "the unrenewed lease is lost")
	// Its lease expires; then the same owner takes the lock again, with a newer token (before,
	// it would have extended the old lease).
	eventually(t, 5*time.Second, "the old lease expires", func() bool {
		status, _ := raw(t, "GET", s.URL+"/locks/report", "", nil)
		return status == http.StatusNotFound
	})
	_, newer := raw(t, "POST", s.URL+"/locks/report", "", map[string]any{"owner": "worker", "ttl_ms": 30_000})
	if newer["lock"].(map[string]any)["fencing_token"].(float64) <= float64(old.Token()) {
		t.Fatalf("the new grant %v has no newer token than %d", newer, old.Token())
	}
	if err := old.Release(context.Background()); err != nil {
		t.Fatalf("the late release (409) is no error: %v", err)
	}
	_, held := raw(t, "GET", s.URL+"/locks/report", "", nil)
	if held["fencing_token"] != newer["lock"].(map[string]any)["fencing_token"] {
		t.Fatalf("the late release freed the newer lease: the server shows %v", held)
	}
}

func TestAnotherOwnerIsToldNotAcquiredWithTheHolder(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	held := lock(t, client, "report", "a", fencelock.TTL(30*time.Second))
	defer held.Release(context.Background())

	lease, err := client.Lock(context.Background(), "report", fencelock.Owner("b"))
	var busy *fencelock.NotAcquired
	if lease != nil || !errors.As(err, &busy) || !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("got %v, %v; want a *NotAcquired", lease, err)
	}
	var problem *fencelock.Problem
	if errors.As(err, &problem) || errors.Is(err, fencelock.ErrOutcomeUnknown) {
		t.Fatalf("not acquired is no problem and no unknown outcome: %v", err)
	}
	if len(busy.Holders) != 1 || busy.Holders[0].Owner != "a" || busy.Holders[0].Token != held.Token() {
		t.Fatalf("holders %+v, want a's lease", busy.Holders)
	}
	if busy.Kind != fencelock.KindLock || strings.Join(busy.Names, ",") != "report" || busy.RetryIn <= 0 || busy.RetryIn > 30*time.Second {
		t.Fatalf("not acquired: %+v", busy)
	}
	if !strings.Contains(err.Error(), "held by a") {
		t.Fatalf("the message names no holder: %v", err)
	}
}

func TestWithoutAnOwnerTwoGoroutinesOfOneProcessExcludeEachOther(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	ctx := context.Background()
	first, err := client.Lock(ctx, "job:in-process")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	host, _ := os.Hostname()
	if !regexp.MustCompile(fmt.Sprintf(`^%s:%d:\d+$`, regexp.QuoteMeta(host), os.Getpid())).MatchString(first.Owner()) {
		t.Fatalf("the default owner is %q, not HOST:PID:N", first.Owner())
	}

	refused := make(chan error, 1)
	go func() {
		second, err := client.Lock(ctx, "job:in-process")
		if err == nil {
			_ = second.Release(ctx)
		}
		refused <- err
	}()
	// As another process would be: not acquired, not an extension of the first's lease.
	var busy *fencelock.NotAcquired
	if err := <-refused; !errors.As(err, &busy) || len(busy.Holders) != 1 || busy.Holders[0].Owner != first.Owner() {
		t.Fatalf("a second goroutine of this process: %v; want not acquired, held by %s", err, first.Owner())
	}
}

func TestAWaiterGetsTheLockWhenTheHolderReleases(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	held := lock(t, client, "report", "a", fencelock.TTL(30*time.Second))
	type result struct {
		lease *fencelock.Lease
		err   error
	}
	waited := make(chan result, 1)
	go func() {
		lease, err := client.Lock(context.Background(), "report", fencelock.Owner("b"), fencelock.Wait(20*time.Second))
		waited <- result{lease, err}
	}()
	eventually(t, 10*time.Second, "the server has b waiting in line", func() bool {
		return metric(t, s, "fencelock_waiters") == "1"
	})
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := <-waited
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.lease.Release(context.Background())
	if got.lease.Owner() != "b" || got.lease.Token() <= held.Token() {
		t.Fatalf("b got token %d after a's %d", got.lease.Token(), held.Token())
	}
}

func TestAWaitLongerThanTheServersMaximumIsSentAsSeveralWaits(t *testing.T) {
	// The server refuses a wait over 2 s; the holder never renews its 4 s lease.
	s := startServer(t, "--max-wait", "2s")
	client := newClient(t, s, fencelock.WithMaxWaitPerRequest(2*time.Second))
	status, crashed := raw(t, "POST", s.URL+"/locks/nightly", "", map[string]any{"owner": "crashed", "ttl_ms": 4000})
	if status != http.StatusOK || crashed["acquired"] != true {
		t.Fatalf("the holder's acquire: %d %v", status, crashed)
	}

	// A TTL far shorter than the wait: counted from the send of the request that was
	// granted (2 s before the grant), the lease would start lost; the guard confirms it by a
	// renewal instead.
	lease, err := client.Lock(context.Background(), "nightly", fencelock.Owner("next"),
		fencelock.TTL(time.Second), fencelock.Wait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	crashedToken := crashed["lock"].(map[string]any)["fencing_token"].(float64)
	if lease.Token() <= uint64(crashedToken) || lease.State() != fencelock.StateHeld || lease.Err() != nil {
		t.Fatalf("after the wait: token %d (the crashed holder's %v), %v, %v", lease.Token(), crashedToken, lease.State(), lease.Err())
	}
}

// metric is the value of a series without labels in the server's /metrics.
func metric(t *testing.T, s *server, series string) string {
	t.Helper()
	response, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	text, _ := io.ReadAll(response.Body)
	for _, line := range strings.Split(string(text), "\n") {
		if value := strings.TrimPrefix(line, series+" "); value != line {
			return value
		}
	}
	return ""
}
