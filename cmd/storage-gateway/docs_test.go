package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/test/repo"
)

// Every storage-gateway command the READMEs show — in shell blocks and in
// command summaries — is one the CLI has, with flags it takes: a renamed
// command or flag fails here, not on a reader's machine. (The blocks a test
// can run, it runs: test/makerun, deploy/quadlet, deploy/helm.)
func TestDocumentedCommandsExist(t *testing.T) {
	seen := 0
	for _, doc := range []string{"README.md", filepath.Join("deploy", "README.md")} {
		data, err := os.ReadFile(filepath.Join(repo.Root(), doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range documentedCommands(string(data)) {
			seen++
			if err := checkCommandLine(line); err != nil {
				t.Errorf("%s: %q: %v", doc, line, err)
			}
		}
	}
	if seen < 40 {
		t.Fatalf("found only %d storage-gateway command lines in the READMEs", seen)
	}
}

// documentedCommands are the lines of the code blocks that run the CLI
// (`storage-gateway ...` or `bin/storage-gateway ...`), continuations
// joined, comments dropped.
func documentedCommands(markdown string) []string {
	var out []string
	inBlock, pending := false, ""
	for _, line := range strings.Split(markdown, "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			continue
		}
		if cont, ok := strings.CutSuffix(strings.TrimRight(line, " "), "\\"); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		for _, part := range regexp.MustCompile(`&&|;|\|`).Split(stripComment(line), -1) {
			part = strings.TrimSpace(part)
			for _, prefix := range []string{"storage-gateway ", "bin/storage-gateway ", "$ bin/storage-gateway ", "$ storage-gateway "} {
				if rest, ok := strings.CutPrefix(part, prefix); ok {
					out = append(out, rest)
				}
			}
		}
	}
	return out
}

// stripComment drops a shell comment outside quotes.
func stripComment(line string) string {
	quote := rune(0)
	for i, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '\'' || r == '"'):
			quote = r
		case quote == 0 && r == '#' && (i == 0 || line[i-1] == ' '):
			return line[:i]
		}
	}
	return line
}

// checkCommandLine finds the command and parses its flags; placeholders and
// optional parts of summaries ([--namespace NS], a|b) are taken as written.
func checkCommandLine(line string) error {
	line = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(line, " ")
	words := strings.Fields(strings.NewReplacer(`"`, "", `'`, "").Replace(line))
	for i, w := range words {
		if alt, _, ok := strings.Cut(w, "|"); ok && !strings.HasPrefix(w, "-") {
			words[i] = alt // a|b in a summary: the first is as good as any
		}
	}
	root := newRootCommand()
	cmd, rest, err := root.Find(words)
	if err != nil {
		return err
	}
	if cmd == root || cmd.HasSubCommands() {
		return fmt.Errorf("no such command below %s", cmd.CommandPath())
	}
	return cmd.ParseFlags(rest)
}

// The operator's manual opens with its contents: one entry per section, in
// order, each linking to its heading's anchor as GitHub makes it.
func TestTheOperatorsManualListsItsSections(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo.Root(), "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	var headings []string
	for _, line := range strings.Split(text, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			headings = append(headings, h)
		}
	}
	entries := regexp.MustCompile(`(?m)^- \[(.+)\]\(#([a-z0-9_-]+)\)$`).FindAllStringSubmatch(text[:strings.Index(text, "\n## ")], -1)
	if len(entries) != len(headings) {
		t.Fatalf("the contents list %d entries, the manual has %d sections: %v", len(entries), len(headings), headings)
	}
	for i, e := range entries {
		if e[1] != headings[i] || e[2] != anchor(headings[i]) {
			t.Errorf("contents entry %d is [%s](#%s), want [%s](#%s)", i+1, e[1], e[2], headings[i], anchor(headings[i]))
		}
	}
}

// anchor is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces as hyphens.
func anchor(heading string) string {
	a := regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(strings.ToLower(heading), "")
	return strings.ReplaceAll(a, " ", "-")
}
