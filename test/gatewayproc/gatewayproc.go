// Package gatewayproc builds the storage-gateway binary once per test binary
// and runs it as a real process — to test what only a process shows:
// signals, exit codes, logs, SIGKILL and restart. It must never be imported
// by production code.
package gatewayproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/repo"

	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/poll"
)

var build struct {
	once sync.Once
	path string
	err  error
}

// Binary builds ./cmd/storage-gateway (once) and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Build builds ./cmd/storage-gateway once per test binary (for TestMain,
// which has no testing.TB) and returns its path.
func Build() (string, error) {
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "sg-binary-")
		if err != nil {
			build.err = err
			return
		}
		build.path = filepath.Join(dir, "storage-gateway")
		cmd := exec.CommandContext(context.Background(), "go", "build", "-o", build.path, "./cmd/storage-gateway")
		cmd.Dir = repo.Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = &buildError{out: string(out), err: err}
		}
	})
	return build.path, build.err
}

// Cleanup removes the built binary; TestMain calls it after the tests.
func Cleanup() {
	if build.path != "" {
		_ = os.RemoveAll(filepath.Dir(build.path))
	}
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return "build storage-gateway: " + e.err.Error() + "\n" + e.out }

// Process is one running `storage-gateway serve`.
type Process struct {
	Cmd *exec.Cmd
	// Addr is the address it logged as listening on.
	Addr string
	// Done receives the exit error once the process ended.
	Done chan error
	// listening receives the address it logs as listening on.
	listening chan string
	mu        sync.Mutex
	logs      bytes.Buffer
}

// NewKeyRing creates a key ring file with `binary keys init` and returns its
// path.
func NewKeyRing(t testing.TB, binary string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keyring.json")
	if out, err := exec.CommandContext(t.Context(), binary, "keys", "init", "--file", path).CombinedOutput(); err != nil {
		t.Fatalf("keys init: %v: %s", err, out)
	}
	return path
}

// NewAdminToken creates a token file with one admin token through `binary
// tokens create` and returns the file's path and the token.
func NewAdminToken(t testing.TB, binary string) (file, token string) {
	t.Helper()
	file = filepath.Join(t.TempDir(), "tokens.json")
	out, err := exec.CommandContext(t.Context(), binary, "tokens", "create", "--file", file, "--role", "admin", "--subject", "test-admin").Output()
	if err != nil {
		t.Fatalf("tokens create: %v", err)
	}
	return file, LastLine(string(out))
}

// LastLine is a command's last line of output (where `tokens create`
// prints the token, alone).
func LastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// Env is the environment of a private gateway: its own home, state
// directory, fresh key ring and token file (SG_GATEWAY_TOKEN holds its admin
// token, for the CLI and Process.Token), a random port, then extra
// (VAR=value).
func Env(t testing.TB, binary string, extra ...string) []string {
	t.Helper()
	tokenFile, token := NewAdminToken(t, binary)
	return append([]string{"HOME=" + t.TempDir(), "SG_STATE_DIR=" + t.TempDir(), "SG_LISTEN_ADDR=127.0.0.1:0",
		"SG_KEY_RING_FILE=" + NewKeyRing(t, binary), "SG_AUTH_TOKEN_FILE=" + tokenFile, "SG_GATEWAY_TOKEN=" + token}, extra...)
}

// Token is the admin token of the process's environment (SG_GATEWAY_TOKEN).
func (p *Process) Token() string {
	for _, kv := range p.Cmd.Env {
		if v, ok := strings.CutPrefix(kv, "SG_GATEWAY_TOKEN="); ok {
			return v
		}
	}
	return ""
}

// Start runs `binary serve` with exactly env and waits until it logs its
// listen address. The process is killed when the test ends.
func Start(t testing.TB, binary string, env []string) *Process {
	t.Helper()
	return StartAll(t, binary, [][]string{env})[0]
}

// StartAll runs one `binary serve` per environment at once, as an
// orchestrator restarts a deployment's replicas, and waits until each
// logs its listen address.
func StartAll(t testing.TB, binary string, envs [][]string) []*Process {
	t.Helper()
	procs := make([]*Process, len(envs))
	for i, env := range envs {
		procs[i] = launch(t, binary, env)
	}
	for _, p := range procs {
		p.waitListening(t)
	}
	return procs
}

// launch starts `binary serve` with exactly env; waitListening waits for
// its listen address. The process is killed when the test ends.
func launch(t testing.TB, binary string, env []string) *Process {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), binary, "serve")
	cmd.Env = env
	// It dies with a test binary killed at its timeout.
	if err := harness.BindToParent(cmd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: cmd, Done: make(chan error, 1), listening: make(chan string, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			var entry struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "listening" {
				p.listening <- entry.Addr
			}
		}
		p.Done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if token := p.Token(); token != "" && strings.Contains(p.Logs(), token) {
			t.Error("the gateway's admin token appears in its log")
		}
		if t.Failed() {
			t.Logf("gateway logs:\n%s", p.Logs())
		}
	})
	return p
}

func (p *Process) waitListening(t testing.TB) {
	t.Helper()
	select {
	case p.Addr = <-p.listening:
	case err := <-p.Done:
		t.Fatalf("gateway exited before listening (%v):\n%s", err, p.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("gateway did not listen within 60s:\n%s", p.Logs())
	}
}

// Logs returns everything the process logged so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// WaitLog waits up to within for a log line containing want.
func (p *Process) WaitLog(t testing.TB, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.Logs(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line contains %s", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitOK waits up to 30 seconds for GET path to answer 200, with token as
// the bearer token when it is not empty.
func (p *Process) WaitOK(t testing.TB, path, token string) {
	t.Helper()
	poll.Until(t, 30*time.Second, path+" answers 200", func() bool {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+p.Addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
