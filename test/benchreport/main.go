// Command benchreport judges the product's benchmarks: it reads the output
// of `go test -bench` (make bench pipes every run through it), echoes it,
// and then prints each target beside the figure measured and the ratio of
// the two, and exits non-zero when a target was missed or not measured.
//
// The targets live here, in one table, and nowhere else: a benchmark
// measures and reports its figures (each beside a baseline of the same
// run), and this command says which of them meet what the product promises.
//
//	go test ./test/e2e -run '^$' -bench StatusLatency -benchtime 40x | go run ./test/benchreport -only StatusLatency
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// target is one promise about one figure of one benchmark: the figure
// (unit) of every result whose name matches bench (a path.Match pattern,
// without the -GOMAXPROCS suffix) is at most (or at least) limit, or the
// figure named base in the same result plus limit.
type target struct {
	bench, unit string
	atLeast     bool
	limit       float64
	base        string
	what        string
}

// targets are the product's. Figures with a baseline of their own
// (direct client-go, a bare watch, an empty gateway) are judged against it
// where the promise is relative.
var targets = []target{
	{bench: "ConcurrentCreates", unit: "gateway/direct", atLeast: true, limit: 0.6, what: "16 concurrent creates, share of direct client-go's creates/s"},
	{bench: "ConcurrentCreates", unit: "gateway-p99-ms", base: "direct-p99-ms", limit: 15, what: "create p99, ms (direct's + 15)"},
	{bench: "VolumeOperations", unit: "get-p50-gateway/direct", limit: 1, what: "get p50, share of direct client-go's"},
	{bench: "VolumeOperations", unit: "list-p50-gateway/direct", limit: 1, what: "list p50, share of direct client-go's"},
	{bench: "StatusLatency", unit: "p99-ms", limit: 50, what: "claim change → CloudEvent p99, ms"},
	{bench: "BoundToRunning/*", unit: "p99-ms", limit: 50, what: "Bound → RUNNING event p99, ms"},
	{bench: "FlappingClaim", unit: "max-events/burst", limit: 3, what: "events per burst of 10 flips, most"},
	{bench: "IdleFleet", unit: "registrations/s", atLeast: true, limit: 200, what: "registrations per second through one replica"},
	{bench: "IdleFleet", unit: "synced-after-registration-s", limit: 60, what: "every environment owned and synced after the last registration, s"},
	{bench: "IdleFleet", unit: "agents-ready-after-registration-s", limit: 60, what: "every environment DCM's ready agent after the last registration, s"},
	{bench: "IdleFleet", unit: "goroutines/env", limit: 12, what: "goroutines per environment, most of any replica"},
	{bench: "IdleFleet", unit: "rss-MiB/env", limit: 0.5, what: "RSS per environment, MiB, most of any replica"},
	{bench: "IdleFleet", unit: "idle-cpu-%core", limit: 5, what: "idle CPU, % of a core, most of any replica"},
	{bench: "IdleFleet", unit: "steady-requests/env/min", limit: 2, what: "API requests per environment per minute, idle"},
	{bench: "IdleFleet", unit: "restart-s", limit: 30, what: "restart of every replica to every connection synced, s"},
	{bench: "IdleFleet", unit: "fleet-query-p99-ms", limit: 100, what: "whole-fleet class query over HTTP p99, ms"},
	{bench: "IdleFleet", unit: "filtered-query-p99-ms", limit: 10, what: "one environment's class query over HTTP p99, ms"},
	{bench: "Replicas/takeover", unit: "takeover-p99-s", limit: 8, what: "served again after SIGKILL of a replica, p99 s"},
	{bench: "Replicas/takeover", unit: "clean-stop-max-s", limit: 2, what: "served again after a replica's clean stop, max s"},
	{bench: "FleetQuery/*/query=all", unit: "p99-ms", limit: 5, what: "whole-fleet class query p99, ms"},
	{bench: "Placement/*/*/*", unit: "p99-ms", limit: 5, what: "placement p99, ms"},
	{bench: "Authentication/repeat-token", unit: "*-added-p99-µs", limit: 100, what: "a repeated token's added p99, µs"},
	{bench: "MetricsScrape", unit: "ms/scrape", limit: 250, what: "scrape of 5,000 environments × 5 classes, ms"},
}

// gomaxprocs is the suffix go test adds to a benchmark's name.
var gomaxprocs = regexp.MustCompile(`-\d+$`)

// figure is one measured value a target applies to.
type figure struct {
	bench, unit   string
	value, limit  float64
	atLeast, miss bool
}

func main() {
	only := flag.String("only", "", "judge only the targets of benchmarks matching this regular expression (a run of some of them)")
	quiet := flag.Bool("q", false, "print only the report, not the benchmark output")
	flag.Parse()
	var echo io.Writer = os.Stdout
	if *quiet {
		echo = io.Discard
	}
	figures, err := read(io.TeeReader(bufio.NewReader(os.Stdin), echo))
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(2)
	}
	filter, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport: -only:", err)
		os.Exit(2)
	}
	if !report(os.Stdout, figures, filter) {
		os.Exit(1)
	}
}

// result is one benchmark result: its name and its figures by unit.
type result struct {
	name   string
	values map[string]float64
}

// read parses the benchmark results in r.
func read(r io.Reader) ([]result, error) {
	var results []result
	reader := benchfmt.NewReader(r, "stdin")
	for reader.Scan() {
		res, ok := reader.Result().(*benchfmt.Result)
		if !ok {
			continue // configuration lines, syntax errors of other output
		}
		values := map[string]float64{}
		for _, v := range res.Values {
			values[v.Unit] = v.Value
		}
		name := strings.TrimPrefix(gomaxprocs.ReplaceAllString(string(res.Name), ""), "Benchmark")
		results = append(results, result{name: name, values: values})
	}
	return results, reader.Err()
}

// judge returns every figure of results that a target applies to.
func judge(results []result, t target) []figure {
	var out []figure
	for _, r := range results {
		if ok, _ := path.Match(t.bench, r.name); !ok {
			continue
		}
		for _, unit := range slices.Sorted(maps.Keys(r.values)) { // a stable order for a report read twice
			v := r.values[unit]
			if ok, _ := path.Match(t.unit, unit); !ok {
				continue
			}
			limit := t.limit
			if t.base != "" {
				base, ok := r.values[t.base]
				if !ok {
					continue
				}
				limit += base
			}
			miss := v > limit
			if t.atLeast {
				miss = v < limit
			}
			out = append(out, figure{bench: r.name, unit: unit, value: v, limit: limit, atLeast: t.atLeast, miss: miss})
		}
	}
	return out
}

// report prints every target of the benchmarks only matches and reports
// whether all of them were measured and met.
func report(w io.Writer, results []result, only *regexp.Regexp) bool {
	ok := true
	const row = "%-62s %-48s %10s %10s %6s  %s\n"
	fmt.Fprintf(w, "\n"+row, "target", "benchmark (figure)", "measured", "target", "ratio", "")
	for _, t := range targets {
		if !only.MatchString(t.bench) {
			continue
		}
		figures := judge(results, t)
		if len(figures) == 0 {
			ok = false
			limit := bound(t.atLeast, t.limit)
			if t.base != "" {
				limit = fmt.Sprintf("%s + %.3g", t.base, t.limit)
			}
			fmt.Fprintf(w, row, t.what, t.bench+" ("+t.unit+")", "-", limit, "-", "NOT MEASURED")
			continue
		}
		for _, f := range figures {
			verdict := "met"
			if f.miss {
				verdict, ok = "MISSED", false
			}
			ratio := "-"
			if f.limit != 0 {
				ratio = fmt.Sprintf("%.2f", f.value/f.limit)
			}
			fmt.Fprintf(w, row, t.what, f.bench+" ("+f.unit+")", fmt.Sprintf("%.3g", f.value), bound(f.atLeast, f.limit), ratio, verdict)
		}
	}
	return ok
}

func bound(atLeast bool, limit float64) string {
	if atLeast {
		return fmt.Sprintf("≥ %.3g", limit)
	}
	return fmt.Sprintf("≤ %.3g", limit)
}
