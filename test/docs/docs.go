// Package docs reads the shell blocks of the repository's Markdown files
// that tests run verbatim: a block whose info string is "sh TAG" (```sh
// walkthrough) is one a test runs, so the documentation's commands stay
// true. It must never be imported by production code.
package docs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/test/harness"
)

// Blocks returns the shell blocks tagged tag in file (relative to the
// repository's root), in order; none fails t.
func Blocks(t testing.TB, file, tag string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(harness.RepoRoot(), file))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var current []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case !in && line == "```sh "+tag:
			in, current = true, nil
		case in && line == "```":
			in = false
			blocks = append(blocks, strings.Join(current, "\n"))
		case in:
			current = append(current, line)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("%s has no ```sh %s block", file, tag)
	}
	return blocks
}

// Run runs a block with bash in dir and env, stopping at the first command
// that fails (-euo pipefail), and returns what it printed; the error holds
// the block and its output.
func Run(ctx context.Context, dir string, env []string, block string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", block)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%w\n--- block:\n%s\n--- output:\n%s", err, block, out)
	}
	return string(out), nil
}
