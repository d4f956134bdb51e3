package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/dcm-project/storage-gateway/test/repo"
)

// The Kubernetes CSI project's programs the harness runs beside a plugin
// driver, each built from its pinned tools module (test/tools).
var (
	snapshotController = toolPackage{"snapshotter", "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"}
	csiSnapshotter     = toolPackage{"snapshotter", "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"}
	csiProvisioner     = toolPackage{"csi-provisioner", "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"}
	csiResizer         = toolPackage{"csi-resizer", "github.com/kubernetes-csi/external-resizer/cmd/csi-resizer"}
)

// resizerAPI is the API the external-resizer (v1.14.0, the newest release
// the module proxy serves) reads VolumeAttributesClasses from: their beta
// version, which Kubernetes still serves when asked to.
const resizerAPI = "storage.k8s.io/v1beta1=true"

// toolPackage is a command's package and the tools module under
// test/tools that pins it.
type toolPackage struct{ module, pkg string }

// snapshotCRDs are the VolumeSnapshot API's CustomResourceDefinitions, from
// the snapshot client module test/tools/snapshotter pins (the version the
// controller is built with).
var snapshotCRDs = []string{
	"snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
	"snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
	"snapshot.storage.k8s.io_volumesnapshots.yaml",
}

var (
	crdOnce  sync.Once
	crdPaths []string
	crdErr   error
)

// snapshotCRDPaths returns the CRD files' paths in the module cache,
// downloading the module (verified against the tools module's go.sum) on
// first use.
func snapshotCRDPaths(ctx context.Context) ([]string, error) {
	crdOnce.Do(func() {
		const module = "github.com/kubernetes-csi/external-snapshotter/client/v8"
		cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
		cmd.Dir = filepath.Join(repo.Root(), "test", "tools", snapshotController.module)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			crdErr = fmt.Errorf("go mod download %s: %w\n%s", module, err, stderr.String())
			return
		}
		var m struct{ Dir string }
		if err := json.Unmarshal(out, &m); err != nil {
			crdErr = fmt.Errorf("go mod download %s: %w", module, err)
			return
		}
		for _, f := range snapshotCRDs {
			crdPaths = append(crdPaths, filepath.Join(m.Dir, "config", "crd", f))
		}
	})
	return crdPaths, crdErr
}

// plugins are the spec's plugin drivers.
func (s Spec) plugins() []Driver {
	var out []Driver
	for _, d := range s.Cluster.Drivers {
		if d.Plugin {
			out = append(out, d)
		}
	}
	return out
}

// startPlugins serves each plugin driver on a socket in the work directory
// and runs the sidecars that drive it — the external-provisioner, the
// csi-snapshotter and the external-resizer per plugin, one snapshot
// controller per cluster — as processes of their own against the admin
// kubeconfig, until ctx ends.
func (c *Cluster) startPlugins(ctx context.Context, kubeconfig string) error {
	plugins := c.Spec.plugins()
	if len(plugins) == 0 {
		return nil
	}
	bins := map[toolPackage]string{}
	for _, t := range []toolPackage{snapshotController, csiSnapshotter, csiProvisioner, csiResizer} {
		bin, err := Tool(ctx, t.module, t.pkg)
		if err != nil {
			return err
		}
		bins[t] = bin
	}
	if err := c.runProcess(ctx, "snapshot-controller", nil, bins[snapshotController],
		"--kubeconfig="+kubeconfig, "--leader-election=false"); err != nil {
		return err
	}
	// Each sidecar's own flags beside the kubeconfig, the plugin's socket
	// and no leader election; the resizer's retries start fast (tests wait
	// on them) and still back off.
	sidecars := []struct {
		name  string
		tool  toolPackage
		flags []string
	}{
		{"csi-provisioner", csiProvisioner, []string{"--worker-threads=4"}},
		{"csi-snapshotter", csiSnapshotter, []string{"--worker-threads=4"}},
		{"csi-resizer", csiResizer, []string{"--workers=4", "--feature-gates=VolumeAttributesClass=true",
			"--retry-interval-start=200ms", "--retry-interval-max=5s"}},
	}
	for i, d := range plugins {
		socket := filepath.Join(c.workDir, fmt.Sprintf("csi-%d.sock", i))
		srv, lis, err := newPluginServer(ctx, d, socket)
		if err != nil {
			return err
		}
		c.wg.Go(func() { _ = srv.Serve(lis) })
		c.wg.Go(func() { <-ctx.Done(); srv.Stop() })
		for _, s := range sidecars {
			args := append([]string{"--kubeconfig=" + kubeconfig, "--csi-address=" + socket, "--leader-election=false"}, s.flags...)
			if err := c.runProcess(ctx, fmt.Sprintf("%s-%d", s.name, i), nil, bins[s.tool], args...); err != nil {
				return err
			}
		}
	}
	return nil
}
