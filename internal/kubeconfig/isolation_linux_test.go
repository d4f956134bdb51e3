package kubeconfig_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig/kubeconfigtest"
)

// TestParseNeverTouchesFilesProcessesOrNetwork runs Parse over every testdata
// file while {{DIR}} holds real files and a plugin script and {{SERVER}} is a
// live listener, then proves nothing was opened, run or dialled.
func TestParseNeverTouchesFilesProcessesOrNetwork(t *testing.T) {
	bait := kubeconfigtest.NewBait(t)
	dir := bait.Env.Dir
	e := bait.Env

	t.Run("sanity: the watcher sees a file being read", func(t *testing.T) {
		if _, err := os.ReadFile(filepath.Join(dir, "ca.crt")); err != nil {
			t.Fatal(err)
		}
		if events := bait.FileEvents(t); len(events) == 0 {
			t.Fatal("reading a watched file produced no inotify event")
		}
	})
	t.Run("sanity: the listener sees a connection", func(t *testing.T) {
		conn, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", bait.Env.Addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()
		if got := bait.Connections(t); len(got) != 1 {
			t.Fatalf("listener saw %d connections, want 1", len(got))
		}
	})

	for _, f := range kubeconfigtest.Files(t, "malicious") {
		for _, allow := range []bool{false, true} {
			_, _ = kubeconfig.Parse(e.Expand(f.Template), kubeconfig.Options{AllowInsecure: allow})
		}
	}
	for _, f := range kubeconfigtest.Files(t, "valid") {
		if _, err := kubeconfig.Parse(e.Expand(f.Template), kubeconfig.Options{AllowInsecure: true}); err != nil {
			t.Errorf("valid file %s: %v", f.Name, err)
		}
	}

	bait.AssertUntouched(t)
}
