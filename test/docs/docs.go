// Package docs reads the blocks of the repository's Markdown files that
// tests run verbatim: a block whose info string is "sh TAG" (```sh
// walkthrough) is one a test runs, and one whose info string is "console
// TAG" is a command ("$ …") and what it prints, which a test runs and
// compares, so the documentation's commands and samples stay true. It
// must never be imported by production code.
package docs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/test/repo"
)

// Blocks returns the shell blocks tagged tag in file (relative to the
// repository's root), in order; none fails t.
func Blocks(t testing.TB, file, tag string) []string {
	t.Helper()
	return blocks(t, file, "sh "+tag)
}

// Sample is a console block: a command and what it prints.
type Sample struct {
	Command string
	Output  []string
}

// Samples returns the console blocks tagged tag in file, in order: each
// block's first line is the command ("$ " and the command), the rest what
// it prints; none fails t.
func Samples(t testing.TB, file, tag string) []Sample {
	t.Helper()
	var out []Sample
	for _, b := range blocks(t, file, "console "+tag) {
		first, rest, _ := strings.Cut(b, "\n")
		command, ok := strings.CutPrefix(first, "$ ")
		if !ok {
			t.Fatalf("%s: a ```console %s block starts with %q, not \"$ \" and a command", file, tag, first)
		}
		out = append(out, Sample{Command: command, Output: strings.Split(rest, "\n")})
	}
	return out
}

// Matches reports whether output is what s shows: line by line, trailing
// spaces aside; a last line "..." stands for any further lines.
func (s Sample) Matches(output string) bool {
	got := strings.Split(strings.TrimRight(output, "\n"), "\n")
	want := s.Output
	if n := len(want); n > 0 && want[n-1] == "..." {
		want = want[:n-1]
		if len(got) > len(want) {
			got = got[:len(want)]
		}
	}
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		if strings.TrimRight(got[i], " ") != strings.TrimRight(want[i], " ") {
			return false
		}
	}
	return true
}

// blocks returns the blocks of file whose info string is info.
func blocks(t testing.TB, file, info string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo.Root(), file))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var current []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case !in && line == "```"+info:
			in, current = true, nil
		case in && line == "```":
			in = false
			blocks = append(blocks, strings.Join(current, "\n"))
		case in:
			current = append(current, line)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("%s has no ```%s block", file, info)
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
