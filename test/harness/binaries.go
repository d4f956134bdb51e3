package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dcm-project/storage-gateway/test/repo"
)

// binDirEnv names a directory that already holds etcd, kube-apiserver and
// kube-controller-manager (the Makefile exports it after building them).
const binDirEnv = "SG_K8S_BIN_DIR"

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// ControlPlaneBinaries returns the directory holding the control-plane
// binaries, building them with test/tools/build-control-plane.sh on first use
// (minutes on a fresh machine, instant once cached).
func ControlPlaneBinaries(ctx context.Context) (string, error) {
	binOnce.Do(func() { binDir, binErr = findOrBuild(ctx) })
	return binDir, binErr
}

func findOrBuild(ctx context.Context) (string, error) {
	if dir := os.Getenv(binDirEnv); dir != "" {
		if err := checkBinaries(dir); err != nil {
			return "", fmt.Errorf("%s=%s: %w", binDirEnv, dir, err)
		}
		return dir, nil
	}
	script := filepath.Join(repo.Root(), "test", "tools", "build-control-plane.sh")
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build control plane: %w\n%s", err, stderr.String())
	}
	dir := strings.TrimSpace(stdout.String())
	return dir, checkBinaries(dir)
}

func checkBinaries(dir string) error {
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("missing executable %s in %s", name, dir)
		}
	}
	return nil
}

// Tool returns the path of a program the tests run that is built from a
// pinned tools module (test/tools/<module>), building it with
// test/tools/build-tool.sh on first use (instant once cached). It refuses
// a program test/tools/programs does not list: make test builds the listed
// ones before any test starts, and an unlisted one would be built inside a
// test's deadline on a fresh machine.
func Tool(ctx context.Context, module, pkg string) (string, error) {
	if err := listedTool(module, pkg); err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo.Root(), "test", "tools", "build-tool.sh"), module, pkg)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s from test/tools/%s: %w\n%s", pkg, module, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// listedTool reports whether test/tools/programs lists pkg from module.
func listedTool(module, pkg string) error {
	list := filepath.Join(repo.Root(), "test", "tools", "programs")
	b, err := os.ReadFile(list)
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == module && f[1] == pkg {
			return nil
		}
	}
	return fmt.Errorf("%s (test/tools/%s) is not listed in %s, which make test builds before the tests", pkg, module, list)
}
