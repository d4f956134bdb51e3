package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestEveryCommandHasHelpPeopleCanUse walks the whole command tree: every
// command shows an example; no flag's help states its default a second time
// (cobra prints defaults itself) or has a backquoted word, which pflag would
// take for the value's placeholder in --help.
func TestEveryCommandHasHelpPeopleCanUse(t *testing.T) {
	var walk func(*cobra.Command)
	seen := 0
	walk = func(cmd *cobra.Command) {
		seen++
		if strings.TrimSpace(cmd.Example) == "" {
			t.Errorf("%q has no example", cmd.CommandPath())
		}
		check := func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "(default") {
				t.Errorf("%s --%s states its default in its usage: %q", cmd.CommandPath(), f.Name, f.Usage)
			}
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s has a backquoted word in its usage: %q", cmd.CommandPath(), f.Name, f.Usage)
			}
		}
		cmd.LocalFlags().VisitAll(check)
		cmd.PersistentFlags().VisitAll(check)
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
	if seen < 38 { // with cobra's completion commands
		t.Fatalf("walked only %d commands", seen)
	}
}

// Flag help says what the flags really do: --gateway without a scheme is
// https off this machine; a volume's access mode cannot be RWOP, a class's
// can; every command that waits for a volume takes --wait.
func TestFlagHelpTellsTheTruth(t *testing.T) {
	root := newRootCommand()
	usage := func(path ...string) func(flag string) string {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		return func(flag string) string {
			f := cmd.Flag(flag)
			if f == nil {
				t.Fatalf("%v has no --%s", path, flag)
			}
			return f.Usage
		}
	}
	for _, tc := range []struct {
		path       []string
		flag, want string
	}{
		{[]string{"env", "list"}, "gateway", "https:// anywhere else"},
		{[]string{"volume", "create"}, "access-mode", "not RWOP"},
		{[]string{"env", "add"}, "access-mode", "not RWOP"},
		{[]string{"classes"}, "access-mode", "RWOP"},
		{[]string{"place"}, "access-mode", "RWOP"},
		{[]string{"volume", "create"}, "wait", "RUNNING"},
		{[]string{"volume", "expand"}, "wait", "new size"},
		{[]string{"volume", "delete"}, "wait", "gone"},
	} {
		if got := usage(tc.path...)(tc.flag); !strings.Contains(got, tc.want) {
			t.Errorf("%v --%s: %q does not say %q", tc.path, tc.flag, got, tc.want)
		}
	}
}
