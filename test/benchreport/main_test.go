package main

import (
	"regexp"
	"strings"
	"testing"
)

const output = `goos: linux
pkg: github.com/dcm-project/storage-gateway/test/e2e
BenchmarkConcurrentCreates-2   	       5	 1 ns/op	 40.0 direct-p99-ms	 54.0 gateway-p99-ms	 0.65 gateway/direct
BenchmarkBoundToRunning/quiet-2	      40	 1 ns/op	 6.1 p99-ms
BenchmarkBoundToRunning/busy-2 	      40	 1 ns/op	 61.0 p99-ms
--- FAIL: BenchmarkStatusLatency-2
PASS
`

// Each figure is judged against its target, one relative to a baseline of
// the same result against that baseline; a benchmark with no figure (it
// failed) is a failure too.
func TestTheReportJudgesEveryFigure(t *testing.T) {
	results, err := read(strings.NewReader(output))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if report(&out, results, regexp.MustCompile("ConcurrentCreates|BoundToRunning")) {
		t.Error("a missed target passed")
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		for _, key := range []string{"(gateway/direct)", "(gateway-p99-ms)", "BoundToRunning/quiet", "BoundToRunning/busy"} {
			if strings.Contains(l, key) {
				lines[key] = strings.Join(strings.Fields(l), " ")
			}
		}
	}
	for key, want := range map[string]string{
		"(gateway/direct)":     "0.65 ≥ 0.6 1.08 met",
		"(gateway-p99-ms)":     "54 ≤ 55 0.98 met",
		"BoundToRunning/quiet": "6.1 ≤ 50 0.12 met",
		"BoundToRunning/busy":  "61 ≤ 50 1.22 MISSED",
	} {
		if !strings.HasSuffix(lines[key], want) {
			t.Errorf("%s: %q, want it to end %q", key, lines[key], want)
		}
	}
	out.Reset()
	if report(&out, results, regexp.MustCompile("StatusLatency")) || !strings.Contains(out.String(), "NOT MEASURED") {
		t.Errorf("a benchmark that failed is not reported as such:\n%s", out.String())
	}
	out.Reset()
	if !report(&out, results, regexp.MustCompile("ConcurrentCreates")) {
		t.Errorf("targets met are reported missed:\n%s", out.String())
	}
}
