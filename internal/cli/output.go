package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// outputFormats are what -o takes on every command that prints gateway
// answers, as kubectl and argocd spell them.
var outputFormats = []string{"table", "wide", "json", "yaml", "name"}

// table says how one kind of item prints: its -o name prefix and name
// (unique among everything the command can list: a volume's names its
// environment too), and its columns (wide ones only with -o wide).
type table[T any] struct {
	kind    string
	name    func(T) string
	columns []column[T]
}

type column[T any] struct {
	header string
	wide   bool
	value  func(T) string
}

// list is how several items print as JSON or YAML: as kubectl prints them,
// a List whose items are the API's objects, so scripts read .items either
// way.
type list[T any] struct {
	Kind  string `json:"kind"`
	Items []T    `json:"items"`
}

// printAnswer prints the one item the gateway answered with (as
// printItems) or, when it answered with none, the problem it answered with.
func printAnswer[T any](cmd *cobra.Command, format string, resp *http.Response, body []byte, item *T, t table[T], describe func(io.Writer, T) error) error {
	if item == nil {
		return problemError(cmd, resp, body)
	}
	return printItems(cmd.OutOrStdout(), format, []T{*item}, true, t, describe)
}

// printItems prints items in format: JSON or YAML as the API returned them
// (one object when single is set, else a List, possibly empty), kind/name
// lines, or a table. describe, when given, prints a single item in the table
// formats instead of a one-row table.
func printItems[T any](w io.Writer, format string, items []T, single bool, t table[T], describe func(io.Writer, T) error) error {
	switch format {
	case "json", "yaml":
		if single {
			return printData(w, format, items[0])
		}
		if items == nil {
			items = []T{}
		}
		return printData(w, format, list[T]{Kind: "List", Items: items})
	case "name":
		for _, item := range items {
			if _, err := fmt.Fprintf(w, "%s/%s\n", t.kind, cell(t.name(item))); err != nil {
				return err
			}
		}
		return nil
	}
	if single && describe != nil {
		return describe(w, items[0])
	}
	wide := format == "wide"
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var row []string
	for _, c := range t.columns {
		if wide || !c.wide {
			row = append(row, c.header)
		}
	}
	fmt.Fprintln(tw, strings.Join(row, "\t"))
	for _, item := range items {
		row = row[:0]
		for _, c := range t.columns {
			if wide || !c.wide {
				row = append(row, cell(c.value(item)))
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// printData writes v as indented JSON or as YAML.
func printData(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}

// details prints label: value lines aligned, skipping empty values: the
// detailed view of one item.
type details struct {
	tw *tabwriter.Writer
}

func newDetails(w io.Writer) *details {
	return &details{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
}

func (d *details) add(label, value string) {
	if value != "" {
		fmt.Fprintf(d.tw, "%s:\t%s\n", label, cell(value))
	}
}

func (d *details) flush() error { return d.tw.Flush() }
