package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fencelock.example/fencelock"
)

// lostError is the lease's Err as a *LostError, failing t if it is not one.
func lostError(t *testing.T, lease *fencelock.Lease) *fencelock.LostError {
	t.Helper()
	var lost *fencelock.LostError
	if !errors.As(lease.Err(), &lost) || lease.State() != fencelock.StateLost || lease.Context().Err() == nil {
		t.Fatalf("the lease is %v, %v: want lost", lease.State(), lease.Err())
	}
	return lost
}

// lostBeforeGrant checks that lease, lost at lostAt, was lost before its end as the holder was
// last told it (expires_at) and before the other owner's grant, and reports by how much. Both
// clocks are this host's: the server's timestamps, and the moment the test saw the loss (at or
// after it).
func lostBeforeGrant(t *testing.T, lease *fencelock.Lease, lostAt time.Time, other *fencelock.Lease, how string) {
	t.Helper()
	told := lease.ExpiresAt()
	if !lostAt.Before(told) {
		t.Fatalf("lost at %v, not before the lease's end as the holder was told it, %v", lostAt, told)
	}
	margin := other.Grants()[0].AcquiredAt.Sub(lostAt)
	if margin <= 0 {
		t.Fatalf("lost at %v, %v after the other owner's grant at %v", lostAt, -margin, other.Grants()[0].AcquiredAt)
	}
	t.Logf("loss margin (%s): lost fired %d ms before the other owner's grant (%d ms before expires_at as told)",
		how, margin.Milliseconds(), told.Sub(lostAt).Milliseconds())
}

func TestLostFiresBeforeAnotherOwnerIsGrantedWhenTheServerIsStopped(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	lease := lock(t, client, "payment:42", "holder", fencelock.TTL(2*time.Second))
	defer lease.Release(context.Background())

	s.signal(t, syscall.SIGSTOP)
	lostAt := closedWithin(t, lease.Lost(), 10*time.Second, "lost fires while the server is stopped")
	s.signal(t, syscall.SIGCONT)
	other, err := client.Lock(context.Background(), "payment:42", fencelock.Owner("other"), fencelock.Wait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(context.Background())

	if lost := lostError(t, lease); lost.Reason != fencelock.ReasonNotRenewed || !errors.Is(lost, fencelock.ErrOutcomeUnknown) {
		t.Fatalf("lost: %v", lost)
	}
	if other.Token() <= lease.Token() {
		t.Fatalf("the other owner's token %d is not above %d", other.Token(), lease.Token())
	}
	lostBeforeGrant(t, lease, lostAt, other, "server stopped with SIGSTOP")
}

func TestLostFiresBeforeAnotherOwnerIsGrantedWhenTheHolderIsCutOff(t *testing.T) {
	s := startServer(t)
	link := startProxy(t, s.URL)
	holder, err := fencelock.New(link.URL, fencelock.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lease := lock(t, holder, "payment:42", "holder", fencelock.TTL(2*time.Second))

	// From now on nothing the holder sends reaches the server, and nothing comes back; the
	// other owner, which talks to the server directly, waits in line for the lock.
	link.cut()
	granted := make(chan *fencelock.Lease, 1)
	go func() {
		other, err := newClient(t, s).Lock(context.Background(), "payment:42", fencelock.Owner("other"), fencelock.Wait(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		granted <- other
	}()
	lostAt := closedWithin(t, lease.Lost(), 10*time.Second, "lost fires while the holder is cut off")
	other := <-granted
	if other == nil {
		t.FailNow()
	}
	defer other.Release(context.Background())
	if lost := lostError(t, lease); lost.Reason != fencelock.ReasonNotRenewed {
		t.Fatalf("lost: %v", lost)
	}
	lostBeforeGrant(t, lease, lostAt, other, "holder cut off from the server")
	// Its release cannot reach the server either: an error, the outcome unknown.
	var unanswered *fencelock.RequestError
	if err := lease.Release(context.Background()); !errors.As(err, &unanswered) || !errors.Is(err, fencelock.ErrOutcomeUnknown) {
		t.Fatalf("a release cut off from the server: %v", err)
	}
}

func TestAGrantAnsweredTooLateStartsLost(t *testing.T) {
	s := startServer(t)
	link := startProxy(t, s.URL)
	// Every answer takes 900 ms to come back. The grant, late, is confirmed by a renewal sent
	// when it came; that renewal is answered 900 ms after its send, when less than the safety
	// margin (200 ms) is left of the second that the lease surely lasts from it.
	link.slow(900 * time.Millisecond)
	client, err := fencelock.New(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	lease := lock(t, client, "payment:42", "holder", fencelock.TTL(time.Second))
	defer lease.Release(context.Background())
	if !isClosed(lease.Lost()) {
		t.Fatalf("a grant with less than the safety margin left is reported %v", lease.State())
	}
	if lost := lostError(t, lease); lost.Reason != fencelock.ReasonNotRenewed || !strings.Contains(lost.Error(), "too late") {
		t.Fatalf("lost: %v", lost)
	}
}

func TestARefusedRenewalIsLostAtOnceWithTheReason(t *testing.T) {
	const workerToken, opsToken = "worker-secret", "ops-secret"
	dir := t.TempDir()
	auth := authFile(t, dir,
		principal{name: "worker", token: workerToken, rights: []string{"read", "lock"}},
		principal{name: "ops", token: opsToken, rights: []string{"read", "lock", "admin"}})
	s := startServer(t, "--auth", auth)
	client := newClient(t, s, fencelock.WithAuthToken(workerToken))

	cases := []struct {
		name   string
		reason fencelock.LostReason
		status int
		// Who takes the lock after the force-release, if anyone: a principal's token, an owner.
		thenToken, thenOwner string
	}{
		{"force-released", fencelock.ReasonGone, http.StatusNotFound, "", ""},
		{"taken by another principal", fencelock.ReasonTaken, http.StatusForbidden, opsToken, "intruder"},
		{"superseded by a newer lease", fencelock.ReasonSuperseded, http.StatusConflict, workerToken, "worker"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("job:%d", i)
			lease := lock(t, client, name, "worker", fencelock.TTL(3*time.Second))
			defer lease.Release(context.Background())
			// No renewal between the steps below, so that the next one meets their result.
			fencelock.PauseRenewal(lease)
			if status, _ := raw(t, "DELETE", s.URL+"/locks/"+name, opsToken, map[string]any{"force": true}); status != http.StatusNoContent {
				t.Fatalf("force-release: %d", status)
			}
			if tc.thenOwner != "" {
				if _, taken := raw(t, "POST", s.URL+"/locks/"+name, tc.thenToken, map[string]any{"owner": tc.thenOwner, "ttl_ms": 30_000}); taken["acquired"] != true {
					t.Fatalf("taking it again: %v", taken)
				}
			}
			giveUpAt := lease.HeldUntil().Add(-lease.SafetyMargin())
			fencelock.ResumeRenewal(lease)

			lostAt := closedWithin(t, lease.Lost(), 10*time.Second, "lost fires after the refused renewal")
			lost := lostError(t, lease)
			var problem *fencelock.Problem
			if lost.Reason != tc.reason || lost.Name != name || lost.Token != lease.Token() || !errors.As(lost, &problem) || problem.Status != tc.status {
				t.Fatalf("lost: %v (cause %#v)", lost, problem)
			}
			// At once: not when the safety margin came.
			if !lostAt.Before(giveUpAt) {
				t.Fatalf("lost only at the give-up point")
			}
			// The release sends nothing for a lease the server refused; the new holder keeps it.
			if err := lease.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if status, _ := raw(t, "GET", s.URL+"/locks/"+name, opsToken, nil); (status == http.StatusOK) != (tc.thenOwner != "") {
				t.Fatalf("after the release, GET answers %d", status)
			}
		})
	}
}

func TestJeopardyWhileRenewalsFailEndsWithTheNextRenewal(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	// Renewing every fifth of the TTL leaves time between the first renewal that times out
	// and the give-up point for the next to succeed.
	lease := lock(t, client, "report", "worker", fencelock.TTL(3*time.Second), fencelock.RenewEvery(600*time.Millisecond))
	defer lease.Release(context.Background())
	jeopardy := lease.Jeopardy()
	if isClosed(jeopardy) {
		t.Fatal("in jeopardy from the start")
	}

	// A renewal that gets no answer in time puts the lease in jeopardy, not lost.
	s.signal(t, syscall.SIGSTOP)
	closedWithin(t, jeopardy, 10*time.Second, "jeopardy while the server is stopped")
	s.signal(t, syscall.SIGCONT)
	if lease.State() == fencelock.StateLost {
		t.Fatalf("lost, not in jeopardy: %v", lease.Err())
	}
	eventually(t, 10*time.Second, "held again once a renewal succeeds", func() bool {
		return lease.State() == fencelock.StateHeld
	})
	if isClosed(lease.Jeopardy()) || isClosed(lease.Lost()) || lease.Err() != nil {
		t.Fatalf("held again, the lease says jeopardy %v, %v", isClosed(lease.Jeopardy()), lease.Err())
	}
}

func TestRenewalsAnswered503AreJeopardyThenLost(t *testing.T) {
	store := startRedis(t)
	s := startServer(t, "--store", "redis://"+store.Addr)
	client := newClient(t, s)
	lease := lock(t, client, "report", "worker", fencelock.TTL(3*time.Second))
	defer lease.Release(context.Background())

	store.kill()
	closedWithin(t, lease.Jeopardy(), 10*time.Second, "jeopardy once renewals are answered 503")
	if isClosed(lease.Lost()) {
		t.Fatalf("lost at the first failed renewal: %v", lease.Err())
	}
	closedWithin(t, lease.Lost(), 10*time.Second, "lost once only the safety margin is left")
	// The cause is the server's 503, not the last retry, cut short by the give-up point.
	lost := lostError(t, lease)
	var problem *fencelock.Problem
	if lost.Reason != fencelock.ReasonNotRenewed || !errors.As(lost, &problem) || problem.Status != 503 {
		t.Fatalf("lost: %v", lost)
	}
	if !errors.Is(lost, fencelock.ErrOutcomeUnknown) {
		t.Fatalf("a 503 leaves the renewal's outcome unknown: %v", lost)
	}
}

func TestALeaseWithACapIsLostBeforeTheCap(t *testing.T) {
	s := startServer(t)
	client := newClient(t, s)
	lease := lock(t, client, "reindex", "job", fencelock.TTL(2*time.Second), fencelock.MaxHold(4*time.Second))
	defer lease.Release(context.Background())
	granted := lease.Grants()[0]
	if !granted.HoldUntil.Equal(granted.AcquiredAt.Add(4 * time.Second)) {
		t.Fatalf("hold_until %v for a grant at %v", granted.HoldUntil, granted.AcquiredAt)
	}
	lostAt := closedWithin(t, lease.Lost(), 10*time.Second, "lost before the cap")
	if lost := lostError(t, lease); lost.Reason != fencelock.ReasonCapReached {
		t.Fatalf("lost: %v", lost)
	}
	if !lostAt.Before(granted.HoldUntil) {
		t.Fatalf("lost at %v, not before the cap %v", lostAt, granted.HoldUntil)
	}
}

// proxy forwards TCP connections to a server, its answers each held back for a delay (a slow
// link), until it is cut: from then on every byte either way is dropped, as in a network
// partition (connections stay open; nothing arrives).
type proxy struct {
	URL     string
	severed atomic.Bool
	delay   atomic.Int64 // how long each piece of an answer is held back, in nanoseconds
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{URL: "http://" + listener.Addr().String()}
	var conns sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		listener.Close()
		conns.Wait()
	})
	address := target[len("http://"):]
	go func() {
		for {
			client, err := listener.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				p.forward(client, address, done)
			}()
		}
	}()
	return p
}

func (p *proxy) cut() { p.severed.Store(true) }

// slow holds back every answer from now on by delay: the time a slow link adds.
func (p *proxy) slow(delay time.Duration) { p.delay.Store(int64(delay)) }

func (p *proxy) forward(client net.Conn, address string, done chan struct{}) {
	defer client.Close()
	server, err := net.Dial("tcp", address)
	if err != nil {
		return
	}
	defer server.Close()
	go p.pump(server, client, false)
	go p.pump(client, server, true)
	<-done
}

// pump copies from to to until either closes, holding back what it reads for the delay if it
// carries answers, and dropping it once the proxy is cut.
func (p *proxy) pump(to, from net.Conn, answers bool) {
	buffer := make([]byte, 32*1024)
	for {
		n, err := from.Read(buffer)
		if n > 0 && answers {
			time.Sleep(time.Duration(p.delay.Load())) // the link's latency, not a wait for state
		}
		if n > 0 && !p.severed.Load() {
			if _, err := to.Write(buffer[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
