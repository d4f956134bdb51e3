package e2e

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
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
// over. footprint: per-replica memory (RSS) and TCP connections to the API
// servers at 200 and 1,000 tenant environments with 1 and 3 replicas.
// takeover: with 3 replicas over 200 environments, the time from SIGKILL of
// one until every environment is owned again, connected and READY and a
// create in one of the victim's environments, sent to a survivor, answers
// 2xx (p50/p99 over 10 kills), and the same from SIGTERM (a clean stop,
// over 5 stops); the replica restarts under its name after each.
// Production settings but for the admin write limit.
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
	b.Run("footprint", func(b *testing.B) {
		for n := range b.N {
			replicaFootprint(b, nats, tenants, n == b.N-1)
		}
	})
	b.Run("takeover", func(b *testing.B) {
		for n := range b.N {
			replicaTakeover(b, nats, tenants[200], n == b.N-1)
		}
	})
}

func replicaFootprint(b *testing.B, nats string, tenants map[int][][]harness.Tenant, report bool) {
	var lines []string
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
			lines = append(lines, fmt.Sprintf("%d environments × %d replicas: RSS %s MiB, API-server connections %s per replica",
				n, replicas, join(rss), join(conns)))
			if report {
				b.ReportMetric(slices.Max(rss), fmt.Sprintf("max-rss-MiB/replica@%denv×%d", n, replicas))
				b.ReportMetric(slices.Max(conns), fmt.Sprintf("max-apiserver-conns/replica@%denv×%d", n, replicas))
			}
			set.kill(syscall.SIGTERM, set.live()...)
		}
	}
	b.Log(strings.Join(lines, "; "))
}

// replicaTakeover kills (SIGKILL) and stops (SIGTERM) replicas of three
// over tenants and reports how long their environments went unserved.
func replicaTakeover(b *testing.B, nats string, tenants [][]harness.Tenant, report bool) {
	set := newReplicaSet(b, nats)
	for _, id := range []string{"a", "b", "c"} {
		set.start(id)
	}
	registerTenants(b, set.client("a"), tenants)
	owners := set.settled(5 * time.Minute)
	measure := func(sig syscall.Signal, rounds int) []time.Duration {
		var took []time.Duration
		for range rounds {
			victim := set.live()[rand.IntN(3)]
			env := ownedBy(owners, victim)[0]
			signalled := time.Now()
			set.kill(sig, victim)
			survivor := set.client(set.live()[0])
			created := make(chan time.Duration, 1)
			go func() { created <- createServed(b, survivor, env, signalled) }()
			set.settled(time.Minute)
			took = append(took, max(time.Since(signalled), <-created))
			set.start(victim)
			owners = set.settled(time.Minute)
		}
		slices.Sort(took)
		return took
	}
	killed, stopped := measure(syscall.SIGKILL, 10), measure(syscall.SIGTERM, 5)
	if report {
		// The p99 of 10 (or 5) is the slowest.
		b.ReportMetric(killed[len(killed)/2].Seconds(), "takeover-p50-s")
		b.ReportMetric(killed[len(killed)-1].Seconds(), "takeover-p99-s")
		b.ReportMetric(stopped[len(stopped)-1].Seconds(), "clean-stop-max-s")
	}
	b.Logf("served again after SIGKILL (3 replicas, 200 environments): p50 %s, p99 %s (all: %v); after SIGTERM: max %s (all: %v)",
		killed[len(killed)/2].Round(100*time.Millisecond), killed[len(killed)-1].Round(100*time.Millisecond), round(killed),
		stopped[len(stopped)-1].Round(100*time.Millisecond), round(stopped))
}

// createServed creates a volume in env through c every 50 ms until it is
// answered 2xx (one id throughout: a create that landed but was not
// answered is replayed) and returns the time since since.
func createServed(b *testing.B, c client, env string, since time.Time) time.Duration {
	v := tenantVolumeIn(env)
	var last string
	for time.Since(since) < time.Minute {
		code, body, err := c.try(http.MethodPost, volumesPath(env)+"?id="+v.id, map[string]any{"spec": storageSpec("t", "1Gi", nil)})
		if err == nil && code/100 == 2 {
			return time.Since(since)
		}
		last = fmt.Sprint(code, body, err)
		timer := time.NewTimer(50 * time.Millisecond)
		<-timer.C
	}
	b.Errorf("a create in %s was not served within a minute: %s", env, last)
	return time.Minute
}

func round(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(100 * time.Millisecond)
	}
	return out
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
