package e2e

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

// BenchmarkReplicas measures what replicas cost and how fast they take
// over: per-replica memory (RSS) and TCP connections to the API
// servers at 200 and 1,000 tenant environments with 1 and 3 replicas, and
// the time from SIGKILL of one of 3 replicas (200 environments) until its
// environments are owned again and READY, p50/p99 over 10 kills (the
// killed replica restarts under its name after each). Production settings
// but for the admin write limit.
//
//	go test ./test/e2e -run '^$' -bench Replicas -benchtime 1x -timeout 60m
func BenchmarkReplicas(b *testing.B) {
	// The idle-fleet benchmark's tenants, all of them at once (one binding
	// grants them the storage read); 200 environments are the first of them.
	tenants := map[int][][]harness.Tenant{1000: make([][]harness.Tenant, len(clusters)), 200: make([][]harness.Tenant, len(clusters))}
	for i, c := range clusters {
		var err error
		if tenants[1000][i], err = c.Tenants(b.Context(), "tenant", 1000/len(clusters)); err != nil {
			b.Fatal(err)
		}
		tenants[200][i] = tenants[1000][i][:200/len(clusters)]
	}
	nats := "SG_NATS_URL=" + natstest.Start(b).URL // replicas share one NATS
	var report []string
	for _, n := range []int{200, 1000} {
		for _, replicas := range []int{1, 3} {
			set := newReplicaSet(b, nats)
			for i := range replicas {
				set.start(string(rune('a' + i)))
			}
			registerTenants(b, set.client("a"), tenants[n])
			set.settled(5 * time.Minute)
			var rss, conns []float64
			for _, id := range set.live() {
				rss = append(rss, scrape(b, set.client(id)).value("process_resident_memory_bytes")/(1<<20))
				conns = append(conns, float64(apiServerConnections(b, set.procs[id].Cmd.Process.Pid)))
			}
			line := fmt.Sprintf("%d environments × %d replicas: RSS %s MiB, API-server connections %s per replica", n, replicas, join(rss), join(conns))
			b.Log(line)
			report = append(report, line)
			b.ReportMetric(slices.Max(rss), fmt.Sprintf("max-rss-MiB/replica@%denv×%d", n, replicas))
			b.ReportMetric(slices.Max(conns), fmt.Sprintf("max-apiserver-conns/replica@%denv×%d", n, replicas))
			for _, id := range set.live() {
				set.kill(id, syscall.SIGTERM)
			}
		}
	}

	set := newReplicaSet(b, nats)
	for _, id := range []string{"a", "b", "c"} {
		set.start(id)
	}
	registerTenants(b, set.client("a"), tenants[200])
	set.settled(5 * time.Minute)
	var takeovers []time.Duration
	for range 10 {
		victim := set.live()[rand.IntN(3)]
		killed := time.Now()
		set.kill(victim, syscall.SIGKILL)
		set.settled(time.Minute)
		takeovers = append(takeovers, time.Since(killed))
		set.start(victim)
		set.settled(time.Minute)
	}
	slices.Sort(takeovers)
	p50, p99 := takeovers[len(takeovers)/2], takeovers[len(takeovers)-1] // p99 of 10 is the slowest
	b.ReportMetric(p50.Seconds(), "takeover-p50-s")
	b.ReportMetric(p99.Seconds(), "takeover-p99-s")
	b.Logf("%s; takeover after SIGKILL (3 replicas, 200 environments, 10 kills): p50 %s, p99 %s (all: %v)",
		strings.Join(report, "; "), p50.Round(100*time.Millisecond), p99.Round(100*time.Millisecond), takeovers)
}

func join(values []float64) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strings.Join(parts, "/")
}

// apiServerConnections counts the established TCP connections process pid
// holds to the harness clusters' API servers (the addresses environments
// are registered with).
func apiServerConnections(tb testing.TB, pid int) int {
	tb.Helper()
	ports := map[string]bool{}
	for _, c := range clusters {
		u, err := url.Parse(c.ServerURL())
		if err != nil {
			tb.Fatal(err)
		}
		ports[fmt.Sprintf("%04X", mustPort(tb, u.Port()))] = true
	}
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "01" { // ESTABLISHED
			continue
		}
		_, remotePort, _ := strings.Cut(fields[2], ":")
		if ports[remotePort] && inodes[fields[9]] {
			n++
		}
	}
	return n
}

func mustPort(tb testing.TB, s string) int {
	tb.Helper()
	p, err := strconv.Atoi(s)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
