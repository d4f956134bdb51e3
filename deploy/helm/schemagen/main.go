// Command schemagen writes into the chart's values.schema.json the names
// extraEnv may set: every SG_* setting the binary reads (config.Variables)
// but those the chart's templates set themselves from values of their
// own, so a misspelt name fails `helm install` instead of being ignored by
// the gateway, and a setting the chart owns is set through its value
// (a second entry of the same name would be a duplicate the chart's own
// one wins or loses by ordering). `make generate` runs it; the chart test
// fails when the list is stale. It rewrites only that list, keeping the
// rest of the file as written.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/dcm-project/storage-gateway/internal/config"
)

// enum finds the list: the "enum" right after the generated-list comment.
var enum = regexp.MustCompile(`("\$comment": "` + regexp.QuoteMeta(comment) + `",\n(\s*)"enum": )\[[^\]]*\]`)

// comment marks the generated list in the schema.
const comment = "every SG_* setting the binary reads that the chart does not set itself; make generate writes this list"

// templateSetting finds the settings a template sets: `- name: SG_…`, or
// a quoted "SG_…" (a name a range sets).
var templateSetting = regexp.MustCompile(`(?m)(?:^\s*- name: |")(SG_[A-Z0-9_]+)(?:\s*$|")`)

// chartSettings are the settings the chart's templates (beside the
// schema, in templates/) set.
func chartSettings(schema string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(filepath.Dir(schema), "templates", "*"))
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // the chart's own templates
		if err != nil {
			return nil, err
		}
		for _, m := range templateSetting.FindAllSubmatch(data, -1) {
			set[string(m[1])] = true
		}
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("no setting found in the templates beside %s", schema)
	}
	return set, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: schemagen values.schema.json")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(file string) error {
	data, err := os.ReadFile(file) //nolint:gosec // the chart's schema, named by go:generate
	if err != nil {
		return err
	}
	m := enum.FindSubmatchIndex(data)
	if m == nil {
		return fmt.Errorf("%s: no \"$comment\": %q followed by an \"enum\"", file, comment)
	}
	indent := string(data[m[4]:m[5]])
	owned, err := chartSettings(file)
	if err != nil {
		return err
	}
	names := slices.Sorted(slices.Values(slices.DeleteFunc(config.Variables(), func(n string) bool { return owned[n] })))
	quoted := make([]string, len(names))
	for i, n := range names {
		q, _ := json.Marshal(n)
		quoted[i] = indent + "  " + string(q)
	}
	list := "[\n" + strings.Join(quoted, ",\n") + "\n" + indent + "]"
	out := append([]byte{}, data[:m[3]]...)
	out = append(out, list...)
	out = append(out, data[m[1]:]...)
	if !json.Valid(out) {
		return fmt.Errorf("%s: the result is not JSON", file)
	}
	return os.WriteFile(file, out, 0o644) //nolint:gosec // a file of the repository, readable like the others
}
