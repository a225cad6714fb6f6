package fencelock_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fencelock.example/fencelock"
)

// serverURL is the server the examples talk to, started by TestMain: in your program, the
// address of yours, e.g. "http://127.0.0.1:7070".
var serverURL string

func TestMain(m *testing.M) {
	s, err := launch()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverURL = s.URL
	code := m.Run()
	s.stop()
	os.Exit(code)
}

// server is a `fencelock serve` of FENCELOCK_BIN, on a free loopback port, with its store
// and log in a temporary folder.
type server struct {
	URL    string
	Dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// startServer starts a server with args (flags of `fencelock serve`; the store is
// sqlite://DIR/x.db unless args give --store) and stops it when t ends.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	s, err := launch(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

func launch(args ...string) (*server, error) {
	bin := os.Getenv("FENCELOCK_BIN")
	if bin == "" {
		return nil, errors.New("FENCELOCK_BIN is not set: the tests need a built fencelock binary (e.g. FENCELOCK_BIN=target/debug/fencelock)")
	}
	dir, err := os.MkdirTemp("", "fencelock-go-")
	if err != nil {
		return nil, err
	}
	full := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)
	if !strings.Contains(strings.Join(args, " "), "--store") {
		full = append(full, "--store", "sqlite://"+filepath.Join(dir, "x.db"))
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	s := &server{Dir: dir, cmd: exec.Command(bin, full...), exited: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// Configured by its flags only: a FENCELOCK_AUTH or FENCELOCK_LOCK_DELAY of the caller's
	// shell would change what the tests see.
	for _, variable := range os.Environ() {
		if !strings.HasPrefix(variable, "FENCELOCK_") {
			s.cmd.Env = append(s.cmd.Env, variable)
		}
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	// It says where it listens once it does.
	deadline := time.Now().Add(15 * time.Second)
	for s.URL == "" {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("fencelock serve %v exited:\n%s", full, s.log())
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("fencelock serve %v did not start in 15 s:\n%s", full, s.log())
		}
		s.URL = s.listening()
		time.Sleep(10 * time.Millisecond)
	}
	return s, nil
}

// listening is the server's URL once its log says it is serving, else "".
func (s *server) listening() string {
	lines := bufio.NewScanner(strings.NewReader(s.log()))
	for lines.Scan() {
		var line struct{ Message, Address, Scheme string }
		if json.Unmarshal(lines.Bytes(), &line) == nil && line.Message == "fencelock is serving" {
			return line.Scheme + "://" + line.Address
		}
	}
	return ""
}

func (s *server) log() string {
	read, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
	return string(read)
}

// signal sends sig to the server (SIGSTOP, SIGCONT).
func (s *server) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to the server: %v", sig, err)
	}
}

// stop ends the server (continued first, if it was stopped) with SIGTERM, or SIGKILL after
// 5 s, and removes its folder.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	_ = os.RemoveAll(s.Dir)
}

// newClient is a client of s, failing t if it cannot be made.
func newClient(t *testing.T, s *server, options ...fencelock.ClientOption) *fencelock.Client {
	t.Helper()
	client, err := fencelock.New(s.URL, options...)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// lock acquires name for owner on client, failing t if it cannot.
func lock(t *testing.T, client *fencelock.Client, name, owner string, options ...fencelock.Option) *fencelock.Lease {
	t.Helper()
	lease, err := client.Lock(context.Background(), name, append([]fencelock.Option{fencelock.Owner(owner)}, options...)...)
	if err != nil {
		t.Fatalf("lock %s for %s: %v", name, owner, err)
	}
	return lease
}

// raw sends method to url with body as JSON (and token as a bearer token, if not empty),
// outside the client: the server's view, or a holder without a guard. It returns the status
// and the JSON body (nil if empty).
func raw(t *testing.T, method, url, token string, body any) (int, map[string]any) {
	t.Helper()
	var payload io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		payload = bytes.NewReader(encoded)
	}
	request, err := http.NewRequest(method, url, payload)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		request.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		request.Header.Set("Authorization", "Bearer "+token)
	}
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer response.Body.Close()
	var answer map[string]any
	_ = json.NewDecoder(response.Body).Decode(&answer)
	return response.StatusCode, answer
}

// eventually polls ok every 10 ms until it holds, failing t if it does not within the time.
func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closedWithin waits for ch to be closed, failing t if it is not within the time, and returns
// when it saw it closed.
func closedWithin(t *testing.T, ch <-chan struct{}, within time.Duration, what string) time.Time {
	t.Helper()
	select {
	case <-ch:
		return time.Now()
	case <-time.After(within):
		t.Fatalf("not within %v: %s", within, what)
	}
	return time.Time{}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// principal is one [[principal]] of an auth file: a name, its token, and rights over a prefix.
type principal struct {
	name, token, prefix string
	rights              []string
}

// authFile writes the --auth file of principals into dir.
func authFile(t *testing.T, dir string, principals ...principal) string {
	t.Helper()
	var toml strings.Builder
	for _, p := range principals {
		hash := sha256.Sum256([]byte(p.token))
		rights, _ := json.Marshal(p.rights)
		fmt.Fprintf(&toml, "[[principal]]\nname = %q\ntoken_sha256 = %q\ngrants = [{ prefix = %q, rights = %s }]\n\n",
			p.name, hex.EncodeToString(hash[:]), p.prefix, rights)
	}
	path := filepath.Join(dir, "auth.toml")
	if err := os.WriteFile(path, []byte(toml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// redis is a throwaway redis-server on a free loopback port, without persistence.
type redis struct {
	Addr string
	cmd  *exec.Cmd
}

// startRedis starts one, stopped when t ends (or before, by kill).
func startRedis(t *testing.T) *redis {
	t.Helper()
	port := freePort(t)
	r := &redis{Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	r.cmd = exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting redis-server (./test installs it): %v", err)
	}
	t.Cleanup(r.kill)
	eventually(t, 10*time.Second, "redis-server accepts connections", func() bool {
		conn, err := net.Dial("tcp", r.Addr)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	return r
}

// kill ends the redis-server at once.
func (r *redis) kill() {
	if r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
}

// freePort is a loopback port nobody listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port
}
