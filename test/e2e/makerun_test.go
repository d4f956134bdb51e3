package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/ports"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// TestMakeRun runs the README's quick start, `make run`, and checks that the
// gateway becomes ready with both local clusters up, that the clusters answer
// with the credentials it wrote, and that Ctrl-C stops everything.
func TestMakeRun(t *testing.T) {
	state := t.TempDir()
	port := ports.Free(t)
	cmd, done, out := startMakeRun(t, port, state, nil, "SG_EMBEDDED_NATS_LISTEN=127.0.0.1:0")

	// Both local clusters run and the gateway kubeconfigs work.
	specs, err := harness.LocalSpecs()
	if err != nil {
		t.Fatal(err)
	}
	var servers []string
	for _, s := range specs {
		path := filepath.Join(state, "clusters", s.Environment.ID+".kubeconfig")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		classes, err := cs.StorageV1().StorageClasses().List(t.Context(), metav1.ListOptions{})
		if err != nil || len(classes.Items) == 0 {
			t.Fatalf("%s: list storage classes with the gateway kubeconfig: %d classes, err %v", s.Environment.ID, len(classes.Items), err)
		}
		servers = append(servers, cfg.Host)
	}

	// make run registered both clusters through the admin CLI, with
	// credentials sealed by the development key ring it generated, and
	// printed how to call the API with the admin token it created; without
	// the token the API refuses.
	gateway := fmt.Sprintf("http://127.0.0.1:%d", port)
	token := makeRunToken(t, out)
	waitForReadyEnvironments(t, gateway, len(specs), token)
	if code, _ := (client{t: t, base: gateway}).do(http.MethodGet, "/api/v1alpha1/environments", nil); code != http.StatusUnauthorized {
		t.Fatalf("an anonymous call answered %d, want 401", code)
	}
	for _, f := range []string{"keyring.json", "tokens.json"} {
		if fi, err := os.Stat(filepath.Join(state, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("development %s: %v, %v", f, fi, err)
		}
	}
	if raw, err := os.ReadFile(filepath.Join(state, "tokens.json")); err != nil || strings.Contains(string(raw), token) {
		t.Fatalf("the token file holds the token itself (or is unreadable: %v)", err)
	}

	// Ctrl-C: the whole group gets SIGINT; gateway and clusters stop.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Logf("make run ended after Ctrl-C: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("make run did not stop within 90s of Ctrl-C")
	}
	for _, addr := range append(servers, fmt.Sprintf("http://127.0.0.1:%d", port)) {
		u, err := url.Parse(addr)
		if err != nil {
			t.Fatal(err)
		}
		if conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", u.Host); err == nil {
			_ = conn.Close()
			t.Errorf("%s still accepts connections after Ctrl-C", addr)
		}
	}
}

// waitForReadyEnvironments polls the environments list until want
// environments are READY.
func waitForReadyEnvironments(t *testing.T, gateway string, want int, token string) {
	t.Helper()
	c := client{t: t, base: gateway, token: token}
	c.eventually(2*time.Minute, fmt.Sprintf("%d READY environments", want), func() bool {
		code, list := c.do(http.MethodGet, "/api/v1alpha1/environments?state=READY", nil)
		envs, _ := list["environments"].([]any)
		return code == http.StatusOK && len(envs) == want
	})
}

// makeRunToken waits for the admin token `make run` prints once the clusters
// are registered (as `export SG_GATEWAY_TOKEN=...`).
func makeRunToken(t *testing.T, out *syncbuf.Buffer) string {
	t.Helper()
	const prefix = "export SG_GATEWAY_TOKEN="
	var token string
	client{t: t}.eventually(3*time.Minute, "make run to print the admin token", func() bool {
		for line := range strings.SplitSeq(out.String(), "\n") {
			if _, after, ok := strings.Cut(line, prefix); ok && strings.HasPrefix(after, "sgw_") {
				token = strings.TrimSpace(after)
				return true
			}
		}
		return false
	})
	return token
}

// startMakeRun runs `make run MAKEARGS` with env, its own database, state
// directory and port, in its own process group (as a terminal gives it), and
// waits for the gateway's /readyz. The group is killed when the test ends.
func startMakeRun(t *testing.T, port int, state string, makeArgs []string, env ...string) (*exec.Cmd, chan error, *syncbuf.Buffer) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"run"}, makeArgs...)...)
	cmd.Dir = harness.RepoRoot()
	cmd.Env = append(os.Environ(), "SG_DATABASE_URL="+pgtest.NewDatabase(t).URL, "SG_STATE_DIR="+state,
		fmt.Sprintf("SG_LISTEN_ADDR=127.0.0.1:%d", port))
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// Ctrl-C first, so fleet stops its clusters (their processes are
		// not all in this group); kill whatever is left after a while.
		if syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) == nil {
			select {
			case <-exited:
			case <-time.After(90 * time.Second):
			}
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if t.Failed() {
			t.Logf("make run output:\n%s", out.String())
		}
	})
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	deadline := time.Now().Add(10 * time.Minute) // includes compiling on a cold cache
	for {
		if resp, err := http.Get(ready); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd, done, out
			}
		}
		select {
		case err := <-done:
			t.Fatalf("make run exited early: %v", err)
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not answer 200")
		}
	}
}

// TestMakeRunWithDCM runs `make run DCM=1`: DCM's service-provider-manager
// runs beside the gateway and both local clusters become ready providers.
func TestMakeRunWithDCM(t *testing.T) {
	port, dcmPort, natsPort := ports.Free(t), ports.Free(t), ports.Free(t)
	dcmAddr := fmt.Sprintf("127.0.0.1:%d", dcmPort)
	startMakeRun(t, port, t.TempDir(), []string{"DCM=1", "DCM_ADDR=" + dcmAddr},
		fmt.Sprintf("SG_EMBEDDED_NATS_LISTEN=127.0.0.1:%d", natsPort))
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get("http://" + dcmAddr + "/api/v1alpha1/providers")
		if err == nil {
			var list struct {
				Providers []struct {
					Name   string `json:"name"`
					Health string `json:"health_status"`
				} `json:"providers"`
			}
			err = json.NewDecoder(resp.Body).Decode(&list)
			_ = resp.Body.Close()
			ready := 0
			for _, p := range list.Providers {
				if p.Health == "ready" {
					ready++
				}
			}
			if err == nil && ready == 2 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("DCM never listed both environments as ready providers")
		}
		time.Sleep(time.Second)
	}
}
