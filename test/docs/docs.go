// Package docs reads the shell blocks of the repository's Markdown files
// that tests run verbatim: a block whose info string is "sh TAG" (```sh
// walkthrough) is one a test runs, so the documentation's commands stay
// true. It must never be imported by production code.
package docs

import (
	"os"
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
