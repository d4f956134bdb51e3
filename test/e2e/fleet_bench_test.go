package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// probeReadyInterval is SG_PROBE_READY_INTERVAL's default, at which the
// benchmark's gateway re-probes its READY environments.
const probeReadyInterval = 10 * time.Minute

// factsListings are the lists of an environment's CSIDrivers,
// CSIStorageCapacities and default namespace's ResourceQuotas every
// factsInterval (the pool's default): like the probe, less often than the
// idle window sees.
const (
	factsListings = 3
	factsInterval = 10 * time.Minute
)

// fleetSize is how many tenant environments BenchmarkIdleFleet registers
// (SG_BENCH_ENVIRONMENTS, default 1,000), split over the harness clusters.
func fleetSize(b *testing.B) int {
	n := 1000
	if v := os.Getenv("SG_BENCH_ENVIRONMENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < len(clusters) {
			b.Fatalf("SG_BENCH_ENVIRONMENTS=%q: want a number of environments ≥ %d", v, len(clusters))
		}
	}
	return n
}

// idleWindow is how long BenchmarkIdleFleet watches the idle gateway
// (SG_BENCH_IDLE, default 2m).
func idleWindow(b *testing.B) time.Duration {
	if v := os.Getenv("SG_BENCH_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second {
			b.Fatalf("SG_BENCH_IDLE=%q: want a duration ≥ 10s", v)
		}
		return d
	}
	return 2 * time.Minute
}

// BenchmarkIdleFleet: the real binary at production settings with 1,000
// environments — tenants of the two harness API servers, each its own
// namespace and least-privilege token — measured against the same binary
// with none, in the same run: goroutines and heap per environment, CPU and
// API requests per environment per minute while nothing happens, and the
// time from a restart to every connection synced (test/benchreport judges
// them).
//
//	go test ./test/e2e -run '^$' -bench IdleFleet -benchtime 1x -timeout 30m
func BenchmarkIdleFleet(b *testing.B) {
	n, window := fleetSize(b), idleWindow(b)
	tenants := make([][]harness.Tenant, len(clusters))
	for i, c := range clusters {
		var err error
		if tenants[i], err = c.Tenants(b.Context(), "tenant", (n+len(clusters)-1-i)/len(clusters)); err != nil {
			b.Fatal(err)
		}
	}
	perEnv := func(v float64) float64 { return v / float64(n) }
	binary := gatewayproc.Binary(b)
	env := gatewayproc.Env(b, binary, "SG_DATABASE_URL="+pgtest.NewDatabase(b).URL,
		"SG_ALLOWED_CLUSTER_CIDRS=127.0.0.0/8", "SG_EMBEDDED_NATS_LISTEN=off",
		// Registering a thousand environments is an admin burst the
		// production per-principal limit (5/s) would stretch to minutes.
		"SG_ADMIN_WRITE_RATE=1000", "SG_ADMIN_WRITE_BURST=1000")
	g := gatewayproc.Start(b, binary, env)
	c := client{t: b, base: "http://" + g.Addr, token: g.Token()}
	// idle lets the gateway settle (what set it working is over), then
	// watches it idle for window: its metrics before and after, and the
	// share of a core it used.
	idle := func(settle, window time.Duration) (before, after metricFamilies, cpu float64, elapsed time.Duration) {
		time.Sleep(settle)
		before, cpuBefore, t0 := scrape(b, c), cpuTime(b, g), time.Now()
		time.Sleep(window)
		after, cpuAfter, elapsed := scrape(b, c), cpuTime(b, g), time.Since(t0)
		return before, after, (cpuAfter - cpuBefore).Seconds() / elapsed.Seconds(), elapsed
	}
	empty, _, baselineCPU, _ := idle(5*time.Second, 20*time.Second) // the empty gateway: start-up work done

	start := time.Now()
	registerTenants(b, c, tenants)
	registered := time.Since(start)
	waitSynced(b, c, n, 5*time.Minute)
	// What one probe of a READY environment costs its cluster (registration
	// probes each once): the idle window below is shorter than
	// SG_PROBE_READY_INTERVAL, so the steady rate adds it per interval.
	perProbe := perEnv(scrape(b, c).value("storage_gateway_cluster_requests_total", "use", "probe") - empty.value("storage_gateway_cluster_requests_total", "use", "probe"))
	b.Logf("%d environments registered in %s, all synced %s after the first registration", n, registered.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// Idle: whatever registration set off (the first probe round) is over.
	before, after, cpu, elapsed := idle(30*time.Second, window)

	goroutines := perEnv(after.value("go_goroutines") - empty.value("go_goroutines"))
	heap := perEnv(after.value("go_memstats_heap_inuse_bytes")-empty.value("go_memstats_heap_inuse_bytes")) / (1 << 20)
	rss := perEnv(after.value("process_resident_memory_bytes")-empty.value("process_resident_memory_bytes")) / (1 << 20)
	minutes := elapsed.Minutes()
	requests := perEnv(after.sum("storage_gateway_cluster_requests_total")-before.sum("storage_gateway_cluster_requests_total")) / minutes
	var byUse []string
	for _, use := range []string{"health", "probe", "watch", "write"} {
		d := after.value("storage_gateway_cluster_requests_total", "use", use) - before.value("storage_gateway_cluster_requests_total", "use", use)
		byUse = append(byUse, fmt.Sprintf("%s %.2f", use, perEnv(d)/minutes))
	}

	// Restart: stop, start the same gateway, wait for every connection.
	if err := g.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	if err := <-g.Done; err != nil {
		b.Fatalf("the gateway did not stop cleanly: %v", err)
	}
	start = time.Now()
	g = gatewayproc.Start(b, binary, env)
	c.base = "http://" + g.Addr
	waitSynced(b, c, n, 5*time.Minute)
	restart := time.Since(start)

	b.ReportMetric(goroutines, "goroutines/env")
	b.ReportMetric(heap, "heap-MiB/env")
	b.ReportMetric(rss, "rss-MiB/env")
	b.ReportMetric(100*cpu, "idle-cpu-%core")
	b.ReportMetric(100*baselineCPU, "empty-gateway-cpu-%core")
	b.ReportMetric(requests, "idle-requests/env/min")
	b.ReportMetric(perProbe, "requests/probe")
	b.ReportMetric(restart.Seconds(), "restart-s")
	b.Logf("%d environments, idle for %s, against the same gateway with none: %.1f goroutines/env, heap %.3f MiB/env, RSS %.3f MiB/env, "+
		"idle CPU %.1f%% of a core (%.1f%% with none), %.2f API requests/env/min (%s; besides, a probe of %.1f requests every %s, +%.2f/min, "+
		"and %d listings every %s, +%.2f/min), "+
		"restart to all synced %s",
		n, elapsed.Round(time.Second), goroutines, heap, rss, 100*cpu, 100*baselineCPU, requests, strings.Join(byUse, ", "),
		perProbe, probeReadyInterval, perProbe/probeReadyInterval.Minutes(), factsListings, factsInterval, factsListings/factsInterval.Minutes(),
		restart.Round(time.Millisecond))
	// Probes and listings are rarer than the idle window: added at their
	// own rates (test/benchreport holds the targets).
	b.ReportMetric(requests+perProbe/probeReadyInterval.Minutes()+factsListings/factsInterval.Minutes(), "steady-requests/env/min")
}

// registerTenants registers every tenant as an environment, 8 at a time.
func registerTenants(b testing.TB, c client, tenants [][]harness.Tenant) {
	b.Helper()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for i, cluster := range clusters {
		for _, t := range tenants[i] {
			kc, err := cluster.TenantKubeconfig(t)
			if err != nil {
				b.Fatal(err)
			}
			id := fmt.Sprintf("%s-%s", cluster.Name(), t.Namespace)
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				code, body, err := c.try(http.MethodPost, "/api/v1alpha1/environments?id="+id, map[string]any{"kubeconfig": string(kc)})
				if err != nil || code != http.StatusCreated {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %d %v %v", id, code, body, err))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if len(failures) > 0 {
		b.Fatalf("%d registrations failed, first: %s", len(failures), failures[0])
	}
}

// waitSynced waits until the pool holds n READY connections with synced
// caches.
func waitSynced(b testing.TB, c client, n int, within time.Duration) {
	b.Helper()
	c.eventually(within, fmt.Sprintf("%d environments READY and synced", n), func() bool {
		return int(scrape(b, c).value("storage_gateway_cluster_connections", "state", "READY", "synced", "true")) == n
	})
}

// metricFamilies is one scrape of the gateway's /metrics.
type metricFamilies map[string]*dto.MetricFamily

func scrape(tb testing.TB, c client) metricFamilies {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return families
}

// value is the metric's value whose labels include labels (name, value, …);
// 0 when there is none.
func (m metricFamilies) value(name string, labels ...string) float64 {
	total := 0.0
	for _, metric := range m[name].GetMetric() {
		if hasLabels(metric, labels) {
			total += metricValue(metric)
		}
	}
	return total
}

// has reports whether the metric has a series whose labels include labels.
func (m metricFamilies) has(name string, labels ...string) bool { return m.count(name, labels...) > 0 }

// count is how many series of the metric have labels among theirs.
func (m metricFamilies) count(name string, labels ...string) int {
	n := 0
	for _, metric := range m[name].GetMetric() {
		if hasLabels(metric, labels) {
			n++
		}
	}
	return n
}

// sum adds up every series of the metric.
func (m metricFamilies) sum(name string) float64 { return m.value(name) }

func hasLabels(metric *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range metric.GetLabel() {
			found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return m.GetUntyped().GetValue()
}
