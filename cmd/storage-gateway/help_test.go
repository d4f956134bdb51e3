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
