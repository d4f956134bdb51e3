// Package dcmtest runs DCM's real service-provider-manager (built from the
// pinned module test/tools/spm by test/tools/build-tool.sh) for
// interoperability tests: on a private Postgres database, against a given
// NATS server, with fast health checks. It must never be imported by production code.
package dcmtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/ports"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// SPM is a running service-provider-manager.
type SPM struct {
	// URL is its API base, e.g. http://127.0.0.1:PORT/api/v1alpha1.
	URL  string
	logs *syncbuf.Buffer
}

// Binary returns the service-provider-manager binary: SG_SPM_BIN, or the
// cached build of the pinned module (built on first use).
func Binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("SG_SPM_BIN"); bin != "" {
		return bin
	}
	bin, err := Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Build builds the manager from the pinned module test/tools/spm (once;
// cached outside the clone) and returns the binary's path.
func Build(ctx context.Context) (string, error) {
	return harness.Tool(ctx, "spm", "github.com/dcm-project/service-provider-manager/cmd/service-provider-manager")
}

// Start runs the manager until the test ends. Its status consumer reads the
// stream dcm-status on dcm.* of natsURL, which must exist.
func Start(t testing.TB, natsURL string) *SPM {
	t.Helper()
	db := pgtest.NewDatabase(t)
	port := ports.Free(t)
	logs := &syncbuf.Buffer{}
	cmd := exec.CommandContext(context.Background(), Binary(t))
	cmd.Env = append(os.Environ(),
		"DB_TYPE=pgsql", "DB_HOST=127.0.0.1", "DB_PORT=5432", "DB_NAME="+db.Name, "DB_USER=postgres", "DB_PASS=",
		fmt.Sprintf("SVC_ADDRESS=127.0.0.1:%d", port), "NATS_URL="+natsURL,
		"HEALTH_CHECK_INTERVAL=1s", "HEALTH_CHECK_TIMEOUT=1s", "HEALTH_CHECK_BASE_BACKOFF_INTERVAL=1s",
		"HEALTH_CHECK_MAX_BACKOFF_INTERVAL=2s")
	cmd.Stdout, cmd.Stderr = logs, logs
	// It dies with a test binary killed at its timeout.
	if err := harness.BindToParent(cmd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if err := <-done; err == nil {
			t.Log("service-provider-manager exited cleanly before it was stopped")
		}
		if t.Failed() {
			t.Logf("service-provider-manager logs:\n%s", logs.String())
		}
	})
	s := &SPM{URL: fmt.Sprintf("http://127.0.0.1:%d/api/v1alpha1", port), logs: logs}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("service-provider-manager exited: %v\n%s", err, logs.String())
		default:
		}
		if s.healthy(t) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("service-provider-manager not healthy within 60s:\n%s", logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *SPM) healthy(t testing.TB) bool {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, s.URL+"/health", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
