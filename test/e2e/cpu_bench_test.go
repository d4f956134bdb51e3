package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/gatewayproc"
)

// cpuTime is the CPU time the gateway process has used (user + system),
// from /proc.
func cpuTime(b *testing.B, p *gatewayproc.Process) time.Duration {
	b.Helper()
	_, cpu, err := procStat(fmt.Sprintf("/proc/%d/stat", p.Cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}

// cpuByProgram is the CPU time every process on the machine has used,
// summed by program name (the kernel's comm, at most 15 characters:
// "storage-gateway", "kube-apiserver", "postgres", "etcd"). A benchmark
// takes it before and after a phase to say which program spent the
// machine's cores.
func cpuByProgram(b *testing.B) map[string]time.Duration {
	b.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]time.Duration{}
	for _, p := range paths {
		if name, cpu, err := procStat(p); err == nil { // processes end while they are read
			if strings.HasPrefix(name, "kworker/") {
				name = "kworker" // the kernel's workers, whatever they work on
			}
			out[name] += cpu
		}
	}
	return out
}

// procStat reads a process's name and CPU time (user + system) from its
// /proc stat file.
func procStat(path string) (string, time.Duration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, fmt.Errorf("%s: unexpected format", path)
	}
	// Fields after the command name (which may hold spaces) start at its
	// closing parenthesis; utime and stime are the 12th and 13th of them.
	fields := strings.Fields(s[end+1:])
	if len(fields) < 13 {
		return "", 0, fmt.Errorf("%s: unexpected format", path)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return "", 0, fmt.Errorf("%s: %w", path, err)
		}
		ticks += v
	}
	const clockTicks = 100 // USER_HZ on Linux
	return s[open+1 : end], time.Duration(ticks) * time.Second / clockTicks, nil
}

// cpuSpent adds what each program spent between two cpuByProgram readings
// to into.
func cpuSpent(into, before, after map[string]time.Duration) {
	for name, t := range after {
		if d := t - before[name]; d > 0 {
			into[name] += d
		}
	}
}

// totalCPU is what all programs spent together.
func totalCPU(spent map[string]time.Duration) time.Duration {
	var total time.Duration
	for _, t := range spent {
		total += t
	}
	return total
}

// msPer is d per operation, in milliseconds.
func msPer(d time.Duration, operations int) float64 {
	return float64(d.Microseconds()) / 1000 / float64(operations)
}

// perOperation formats the programs' CPU time per operation, largest first,
// leaving out what spent less than 1% of the total.
func perOperation(spent map[string]time.Duration, operations int) string {
	total := totalCPU(spent)
	names := slices.SortedFunc(maps.Keys(spent), func(a, b string) int { return int(spent[b] - spent[a]) })
	var parts []string
	for _, name := range names {
		if spent[name]*100 >= total {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, msPer(spent[name], operations)))
		}
	}
	return fmt.Sprintf("%.2f ms CPU per operation (%s)", msPer(total, operations), strings.Join(parts, ", "))
}
