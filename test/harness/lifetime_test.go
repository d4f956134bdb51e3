package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/repo"

	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// TestControlPlaneDiesWithAKilledHarness kills a harness process outright
// (SIGKILL: no cleanup runs): its etcd, kube-apiserver,
// kube-controller-manager and emulated drivers must die with it, and the
// next harness start removes the work directory it left.
func TestControlPlaneDiesWithAKilledHarness(t *testing.T) {
	tmp := t.TempDir()
	launcher := filepath.Join(t.TempDir(), "local-clusters")
	build := exec.Command("go", "build", "-o", launcher, "./cmd/local-clusters")
	build.Dir = repo.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build local-clusters: %v\n%s", err, out)
	}
	out := &syncbuf.Buffer{}
	cmd := exec.Command(launcher, "-out", filepath.Join(tmp, "out"), filepath.Join(repo.Root(), "environments", "local-east.yaml"))
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	poll.Until(t, 3*time.Minute, "local-clusters ready", func() bool { return strings.Contains(out.String(), "cluster(s) ready") })
	running := strings.Join(ProcessesWithEnv("TMPDIR="+tmp), "\n")
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if !strings.Contains(running, name) {
			t.Fatalf("no %s among the harness's processes:\n%s", name, running)
		}
	}
	// The emulated drivers' controllers: the harness executable again.
	if !strings.Contains(running, launcher+" --kubeconfig=") {
		t.Fatalf("no emulated drivers among the harness's processes:\n%s", running)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	WaitForNoProcessesWithEnv(t, "TMPDIR="+tmp, 15*time.Second)

	abandoned, _ := filepath.Glob(filepath.Join(tmp, workDirPattern+"*"))
	if len(abandoned) != 1 {
		t.Fatalf("work directories after the kill: %v", abandoned)
	}
	t.Setenv("TMPDIR", tmp)
	dir, lock, err := newWorkDir("live") // sweeps first
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abandoned[0]); !os.IsNotExist(err) {
		t.Fatalf("the abandoned work directory survived the next start: %v", err)
	}
	removeAbandonedWorkDirs()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a work directory in use was swept: %v", err)
	}
	_ = lock.Close()
	removeAbandonedWorkDirs()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a released work directory was not swept: %v", err)
	}
}
