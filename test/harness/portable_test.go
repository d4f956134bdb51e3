package harness

import (
	"os"
	"os/exec"
	"testing"
)

// make run and make test work on macOS too: the launcher behind make run,
// the dev commands, the gateway and every package with its tests build for
// darwin. Only a Linux kernel has a parent-death signal; elsewhere the
// launcher runs each program in its own process group and kills the group
// when its parent dies (lifetime_other.go).
func TestBuildsForMacOS(t *testing.T) {
	for _, args := range [][]string{
		{"build", "-o", t.TempDir(), "./cmd/...", "./test/dcmtest/cmd/spm"},
		{"vet", "./..."},
	} {
		cmd := exec.CommandContext(t.Context(), "go", args...)
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=darwin go %v: %v\n%s", args, err, out)
		}
	}
}
