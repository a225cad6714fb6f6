package fencelock_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestTheREADMEsProgramHoldsALock does what the README tells a newcomer: it makes a module,
// adds this one with the README's `go mod edit` line, and runs the README's program (whose
// body is the README's first lines, as written) against a real server.
func TestTheREADMEsProgramHoldsALock(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 2 {
		t.Fatal("the README has no first lines and program in Go")
	}
	firstLines, program := blocks[0][1], blocks[1][1]
	indented := "\t" + strings.ReplaceAll(strings.TrimSuffix(firstLines, "\n"), "\n", "\n\t") + "\n"
	if !strings.Contains(program, indented) {
		t.Fatalf("the README's program does not hold its first lines as written:\n%s", firstLines)
	}
	install := regexp.MustCompile(`(?m)^go mod edit .*$`).FindString(string(readme))
	if install == "" {
		t.Fatal("the README has no `go mod edit` line")
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	install = strings.Replace(install, "/path/to/fencelock/clients/go", here, 1)

	s := startServer(t)
	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(strings.Replace(program, "http://127.0.0.1:7070", s.URL, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	goTool := goCommand(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = app
		// Nothing to fetch: the module is replaced by this folder, and no proxy is asked.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "init", "example.com/pay")
	run(strings.Fields(install)[1:]...)
	out := run("run", ".")

	if !regexp.MustCompile(`charging payment 42 with fencing token [1-9][0-9]*\n`).MatchString(out) {
		t.Fatalf("the program said:\n%s", out)
	}
	if status, body := raw(t, "GET", s.URL+"/locks/payment:42", "", nil); status != http.StatusNotFound {
		t.Fatalf("after the program, the lock is not released: %d %v", status, body)
	}
}

// goCommand is the go command that runs these tests: on the PATH (./test puts it there), or
// in the GOROOT this test was built with.
func goCommand(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath("go"); err == nil {
		return path
	}
	path := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no go command on the PATH nor in %s", runtime.GOROOT())
	}
	return path
}
