package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"fencelock.example/fencelock"
)

func TestEveryProblemIsATypedError(t *testing.T) {
	const token = "billing-secret"
	dir := t.TempDir()
	auth := authFile(t, dir, principal{name: "billing", token: token, prefix: "payment:", rights: []string{"read", "lock"}})
	guarded := startServer(t, "--auth", auth)
	billing := newClient(t, guarded, fencelock.WithAuthToken(token))
	throttled := startServer(t, "--rate-limit", "1", "--rate-burst", "1")
	store := startRedis(t)
	storeless := startServer(t, "--store", "redis://"+store.Addr)
	store.kill()
	ctx := context.Background()

	cases := []struct {
		name   string
		call   func() error
		status int
		typ    fencelock.ProblemType
		// fields are the invalid fields a 422 lists, sorted.
		fields string
	}{
		{"invalid fields", func() error {
			_, err := billing.Lock(ctx, "payment:42", fencelock.Owner("  "), fencelock.TTL(48*time.Hour))
			return err
		}, 422, fencelock.ProblemInvalidFields, "owner,ttl_ms"},
		{"a name too long", func() error {
			_, err := billing.Lock(ctx, "payment:"+strings.Repeat("x", 300))
			return err
		}, 422, fencelock.ProblemInvalidFields, "resource"},
		{"no auth token", func() error {
			_, err := newClient(t, guarded).Lock(ctx, "payment:42")
			return err
		}, 401, fencelock.ProblemUnauthorized, ""},
		{"no right on the name", func() error {
			_, err := billing.Lock(ctx, "orders:7")
			return err
		}, 403, fencelock.ProblemDenied, ""},
		{"too many requests", func() error {
			client := newClient(t, throttled)
			for {
				lease, err := client.Lock(ctx, "report")
				if err != nil {
					return err
				}
				_ = lease.Release(ctx)
			}
		}, 429, fencelock.ProblemTooManyRequests, ""},
		{"store unavailable", func() error {
			_, err := newClient(t, storeless).Lock(ctx, "report")
			return err
		}, 503, fencelock.ProblemUnavailable, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var problem *fencelock.Problem
			if !errors.As(err, &problem) {
				t.Fatalf("got %v; want a *Problem", err)
			}
			if problem.Status != tc.status || problem.Type != tc.typ || problem.Title == "" || problem.Detail == "" {
				t.Fatalf("got %#v; want %d %s", problem, tc.status, tc.typ)
			}
			var fields []string
			for _, f := range problem.Errors {
				fields = append(fields, f.Field)
				if !strings.Contains(err.Error(), f.Field+": "+f.Message) {
					t.Fatalf("the message %q leaves out %+v", err, f)
				}
			}
			sort.Strings(fields)
			if strings.Join(fields, ",") != tc.fields {
				t.Fatalf("invalid fields %v, want %s", fields, tc.fields)
			}
			if errors.Is(err, fencelock.ErrOutcomeUnknown) != (tc.status == 503) || errors.Is(err, fencelock.ErrNotAcquired) {
				t.Fatalf("%d: outcome unknown %v", tc.status, errors.Is(err, fencelock.ErrOutcomeUnknown))
			}
			if (problem.RetryAfter >= time.Second) != (tc.status == 429) {
				t.Fatalf("%d: Retry-After %v", tc.status, problem.RetryAfter)
			}
		})
	}
}

func TestAWaitThatWouldCloseACycleIsADeadlockProblem(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	ctx := context.Background()
	x := lock(t, client, "x", "a")
	y := lock(t, client, "y", "b")
	defer y.Release(ctx)
	waited := make(chan error, 1)
	go func() {
		lease, err := client.Lock(ctx, "y", fencelock.Owner("a"), fencelock.Wait(20*time.Second))
		if err == nil {
			err = lease.Release(ctx)
		}
		waited <- err
	}()
	eventually(t, 10*time.Second, "a waits for y", func() bool { return metric(t, s, "fencelock_waiters") == "1" })

	_, err := client.Lock(ctx, "x", fencelock.Owner("b"), fencelock.Wait(20*time.Second))
	var problem *fencelock.Problem
	if !errors.As(err, &problem) || problem.Type != fencelock.ProblemDeadlock || problem.Status != http.StatusConflict || !strings.Contains(problem.Detail, "a waits") {
		t.Fatalf("got %v; want a deadlock problem", err)
	}
	// Nothing was released: b still holds y, which a gets once b lets it go.
	if err := y.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	_ = x.Release(ctx)
}

func TestAServerThatCannotBeReachedIsARequestError(t *testing.T) {
	client, err := fencelock.New(fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Lock(context.Background(), "report")
	var unanswered *fencelock.RequestError
	var problem *fencelock.Problem
	if !errors.As(err, &unanswered) || errors.As(err, &problem) || !errors.Is(err, fencelock.ErrOutcomeUnknown) || unanswered.Method != "POST" {
		t.Fatalf("got %v; want a *RequestError", err)
	}
}

func TestOptionsThatCannotWorkAreRefusedBeforeAnythingIsSent(t *testing.T) {
	// Nobody listens there: anything sent would be a *RequestError.
	client, err := fencelock.New(fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lockWith := func(options ...fencelock.Option) func() error {
		return func() error {
			_, err := client.Lock(ctx, "report", options...)
			return err
		}
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"a TTL under a millisecond", lockWith(fencelock.TTL(500 * time.Microsecond))},
		{"a negative wait", lockWith(fencelock.Wait(-time.Second))},
		{"renewals too rare for the TTL", lockWith(fencelock.TTL(3*time.Second), fencelock.RenewEvery(2500*time.Millisecond))},
		{"a cap within the safety margin", lockWith(fencelock.TTL(10*time.Second), fencelock.MaxHold(2*time.Second))},
		{"a cap on a semaphore", func() error {
			_, err := client.Semaphore(ctx, "gpu", 2, fencelock.MaxHold(time.Hour))
			return err
		}},
		{"a server address without a scheme", func() error {
			_, err := fencelock.New("127.0.0.1:7070")
			return err
		}},
		{"a server address with a query", func() error {
			_, err := fencelock.New("http://127.0.0.1:7070/?x=1")
			return err
		}},
		{"a CA file that is not there", func() error {
			_, err := fencelock.New("https://127.0.0.1:7070", fencelock.WithCAFile(t.TempDir()+"/none.pem"))
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, fencelock.ErrInvalidOption) {
				t.Fatalf("got %v; want ErrInvalidOption", err)
			}
		})
	}
}
