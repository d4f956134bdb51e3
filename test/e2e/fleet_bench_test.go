package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dcm-project/storage-gateway/test/controlplane"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// probeReadyInterval is SG_PROBE_READY_INTERVAL's default, at which the
// benchmark's gateway re-probes its READY environments.
const probeReadyInterval = 10 * time.Minute

// factsListings are the lists of an environment's facts per factsInterval
// (the pool's default): its CSIStorageCapacities and default namespace's
// ResourceQuotas every interval, its CSIDrivers, VolumeSnapshotClasses and
// VolumeAttributesClasses every third. Like the probe, less often than the
// idle window sees.
const (
	factsListings = 2 + 3.0/3
	factsInterval = 10 * time.Minute
)

// fleetSize is how many tenant environments BenchmarkIdleFleet registers
// (SG_BENCH_ENVIRONMENTS, default 1,000), split over the harness clusters.
func fleetSize(b *testing.B) int {
	return benchSetting(b, "SG_BENCH_ENVIRONMENTS", 1000, len(clusters))
}

// replicaCount is how many replicas BenchmarkIdleFleet runs
// (SG_BENCH_REPLICAS, default 1).
func replicaCount(b *testing.B) int { return benchSetting(b, "SG_BENCH_REPLICAS", 1, 1) }

// agentsServed says whether BenchmarkIdleFleet serves every environment as
// DCM's agent, through the control plane's stand-in (SG_BENCH_AGENTS,
// default 1; 0 measures the gateway without).
func agentsServed(b *testing.B) bool { return benchSetting(b, "SG_BENCH_AGENTS", 1, 0) != 0 }

func benchSetting(b *testing.B, name string, def, least int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		b.Fatalf("%s=%q: want a number ≥ %d", name, v, least)
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

// Class queries BenchmarkIdleFleet asks over HTTP: the whole fleet's
// classes, and those of one environment that a filter keeps (a dashboard
// looking at one cluster).
const (
	wholeFleetQuery    = "/api/v1alpha1/storage-classes"
	filteredFleetQuery = "/api/v1alpha1/storage-classes?access_mode=ReadWriteOnce&expandable=true&environment="
)

// replicaSample is one replica's metrics and CPU time at one moment.
type replicaSample struct {
	metrics metricFamilies
	cpu     time.Duration
}

// BenchmarkIdleFleet: the real binary at production settings, as
// SG_BENCH_REPLICAS replicas (default 1) over SG_BENCH_ENVIRONMENTS
// environments (default 1,000) — tenants of the two harness API servers,
// each its own namespace and least-privilege token — each one DCM's agent
// too (the control plane's stand-in; SG_BENCH_AGENTS=0 leaves the agents
// out), registered through one replica, measured against the same replicas
// with none, in the same run: the registration rate and the time from the
// last registration to every environment owned, connected and synced (and
// a ready agent); per replica (the most of
// any), goroutines and RSS per environment it owns and its CPU while
// nothing happens; API requests per environment per minute while idle;
// the time from a restart of every replica to every connection synced; and
// the whole-fleet and a filtered class query over HTTP on the last replica
// (test/benchreport judges them).
//
//	go test ./test/e2e -run '^$' -bench IdleFleet -benchtime 1x -timeout 30m
//	SG_BENCH_ENVIRONMENTS=10000 SG_BENCH_REPLICAS=3 go test ./test/e2e -run '^$' -bench IdleFleet -benchtime 1x -timeout 90m
func BenchmarkIdleFleet(b *testing.B) {
	n, window, replicas := fleetSize(b), idleWindow(b), replicaCount(b)
	tenants := make([][]harness.Tenant, len(clusters))
	for i, c := range clusters {
		var err error
		if tenants[i], err = c.Tenants(b.Context(), "tenant", (n+len(clusters)-1-i)/len(clusters)); err != nil {
			b.Fatal(err)
		}
	}
	// A NATS server as DCM's runs by default: the fleet's agents take two
	// consumers of its request stream, whatever the fleet's size.
	natsURL := natstest.Start(b).URL
	settings := []string{"SG_NATS_URL=" + natsURL}
	var cp *controlplane.ControlPlane
	if agentsServed(b) {
		cp = controlplane.Start(b, controlplane.Options{NATSURL: natsURL})
		settings = append(settings, "SG_DCM_AGENT_API_URL="+cp.URL)
	}
	set := newReplicaSet(b, settings...)
	ids := make([]string, replicas)
	for i := range ids {
		ids[i] = string(rune('a' + i))
	}
	set.startAll(ids...)
	sample := func() map[string]replicaSample {
		out := map[string]replicaSample{}
		for _, id := range ids {
			out[id] = replicaSample{metrics: scrape(b, set.client(id)), cpu: cpuTime(b, set.procs[id])}
		}
		return out
	}
	// idle lets the replicas settle (what set them working is over), then
	// watches them idle for window, and counts the agents' heartbeats.
	heartbeats := func() int {
		if cp == nil {
			return 0
		}
		return cp.Heartbeats()
	}
	idle := func(settle, window time.Duration) (before, after map[string]replicaSample, elapsed time.Duration, beats int) {
		time.Sleep(settle)
		before, t0, beats0 := sample(), time.Now(), heartbeats()
		time.Sleep(window)
		return before, sample(), time.Since(t0), heartbeats() - beats0
	}
	cpuShare := func(before, after map[string]replicaSample, id string, elapsed time.Duration) float64 {
		return (after[id].cpu - before[id].cpu).Seconds() / elapsed.Seconds()
	}
	sum := func(samples map[string]replicaSample, name string, labels ...string) float64 {
		total := 0.0
		for _, s := range samples {
			total += s.metrics.value(name, labels...)
		}
		return total
	}
	emptyBefore, empty, emptyElapsed, _ := idle(5*time.Second, 20*time.Second) // no environment: start-up work done

	registration := map[string]time.Duration{}
	cpu0, start := cpuByProgram(b), time.Now()
	registerTenants(b, set.client(ids[0]), tenants)
	registered := time.Since(start)
	owners := set.settled(10 * time.Minute)
	synced := time.Since(start) - registered
	if cp != nil {
		// Every environment DCM's agent too: registered and heartbeating.
		poll.UntilEvery(b, time.Second, 10*time.Minute, "every environment DCM's ready agent", func() bool { return readyAgents(cp) == n })
		agents := time.Since(start) - registered
		b.Logf("every environment DCM's ready agent %s after the last registration", agents.Round(time.Millisecond))
		b.ReportMetric(agents.Seconds(), "agents-ready-after-registration-s")
	}
	cpuSpent(registration, cpu0, cpuByProgram(b))
	owned := map[string]float64{}
	for _, m := range owners {
		owned[m]++
	}
	// What one probe of a READY environment costs its cluster (registration
	// probes each once): the idle window below is shorter than
	// SG_PROBE_READY_INTERVAL, so the steady rate adds it per interval.
	perProbe := (sum(sample(), "storage_gateway_cluster_requests_total", "use", "probe") - sum(empty, "storage_gateway_cluster_requests_total", "use", "probe")) / float64(n)
	b.Logf("%d environments registered through one of %d replicas in %s (%.0f/s); every one owned, connected and synced %s after the last",
		n, replicas, registered.Round(time.Millisecond), float64(n)/registered.Seconds(), synced.Round(time.Millisecond))

	// Idle: whatever registration set off (the first probe round) is over.
	before, after, elapsed, beats := idle(30*time.Second, window)
	if cp != nil {
		b.Logf("idle agents: %.1f heartbeats/s (%d environments every %s: %.1f/s)", float64(beats)/elapsed.Seconds(), n, agentHeartbeat, float64(n)/agentHeartbeat.Seconds())
		b.ReportMetric(float64(beats)/elapsed.Seconds(), "agent-heartbeats/s")
	}
	var goroutines, rss, cpu, emptyCPU []float64
	var lines []string
	for _, id := range ids {
		per := func(name string) float64 {
			return (after[id].metrics.value(name) - empty[id].metrics.value(name)) / owned[id]
		}
		goroutines = append(goroutines, per("go_goroutines"))
		rss = append(rss, per("process_resident_memory_bytes")/(1<<20))
		cpu = append(cpu, cpuShare(before, after, id, elapsed))
		emptyCPU = append(emptyCPU, cpuShare(emptyBefore, empty, id, emptyElapsed))
		lines = append(lines, fmt.Sprintf("%s owns %.0f: %.1f goroutines/env, heap %.3f MiB/env, RSS %.3f MiB/env, idle CPU %.1f%% of a core (%.1f%% with none)",
			id, owned[id], goroutines[len(goroutines)-1], per("go_memstats_heap_inuse_bytes")/(1<<20), rss[len(rss)-1], 100*cpu[len(cpu)-1], 100*emptyCPU[len(emptyCPU)-1]))
	}
	minutes := elapsed.Minutes()
	requests := (sum(after, "storage_gateway_cluster_requests_total") - sum(before, "storage_gateway_cluster_requests_total")) / float64(n) / minutes
	var byUse []string
	for _, use := range []string{"health", "probe", "watch", "write"} {
		d := sum(after, "storage_gateway_cluster_requests_total", "use", use) - sum(before, "storage_gateway_cluster_requests_total", "use", use)
		byUse = append(byUse, fmt.Sprintf("%s %.2f", use, d/float64(n)/minutes))
	}

	// The fleet's classes over HTTP, on the replica that did not register:
	// the whole answer names every environment, the filtered one only its
	// environment.
	asker := set.client(ids[len(ids)-1])
	one := slices.Min(slices.Collect(maps.Keys(owners)))
	whole, wholeBytes := fleetQueryTimes(b, asker, wholeFleetQuery, 20)
	filtered, _ := fleetQueryTimes(b, asker, filteredFleetQuery+one, 100)
	if got := answeredEnvironments(b, asker, wholeFleetQuery); len(got) != n {
		b.Fatalf("the whole-fleet answer names %d environments, want %d", len(got), n)
	}
	if got := answeredEnvironments(b, asker, filteredFleetQuery+one); !maps.Equal(got, map[string]bool{one: true}) {
		b.Fatalf("the filtered answer names %v, want only %s", slices.Collect(maps.Keys(got)), one)
	}

	// Restart: stop every replica, start them again at once (as an
	// orchestrator restarting the deployment does), wait for every
	// connection.
	set.kill(syscall.SIGTERM, ids...)
	restarting := map[string]time.Duration{}
	cpu0, start = cpuByProgram(b), time.Now()
	set.startAll(ids...)
	set.settled(10 * time.Minute)
	restart := time.Since(start)
	cpuSpent(restarting, cpu0, cpuByProgram(b))
	// Where registration and restart are bound by the machine's cores, the
	// split says whose work fills them: the gateway's own, its database's,
	// or the clusters' (the harness API servers and etcd).
	b.Logf("registration and sync, per environment: %s", perOperation(registration, n))
	b.Logf("restart, per environment: %s", perOperation(restarting, n))
	b.ReportMetric(msPer(totalCPU(registration), n), "registration-cpu-ms/env")
	b.ReportMetric(msPer(registration["storage-gateway"], n), "registration-gateway-cpu-ms/env")
	b.ReportMetric(msPer(totalCPU(restarting), n), "restart-cpu-ms/env")
	b.ReportMetric(msPer(restarting["storage-gateway"], n), "restart-gateway-cpu-ms/env")

	b.ReportMetric(float64(n)/registered.Seconds(), "registrations/s")
	b.ReportMetric(synced.Seconds(), "synced-after-registration-s")
	b.ReportMetric(slices.Max(goroutines), "goroutines/env")
	b.ReportMetric(slices.Max(rss), "rss-MiB/env")
	b.ReportMetric(100*slices.Max(cpu), "idle-cpu-%core")
	b.ReportMetric(100*slices.Max(emptyCPU), "empty-gateway-cpu-%core")
	b.ReportMetric(requests, "idle-requests/env/min")
	b.ReportMetric(perProbe, "requests/probe")
	b.ReportMetric(restart.Seconds(), "restart-s")
	wholeP50, wholeP99 := percentiles(whole)
	_, filteredP99 := percentiles(filtered)
	b.ReportMetric(float64(wholeP99.Microseconds())/1000, "fleet-query-p99-ms")
	b.ReportMetric(float64(filteredP99.Microseconds())/1000, "filtered-query-p99-ms")
	b.Logf("%d environments on %d replicas, idle for %s, against the same replicas with none: %s; %.2f API requests/env/min (%s; besides, a probe of %.1f requests every %s, +%.2f/min, "+
		"and %.1f listings every %s, +%.2f/min); whole-fleet class query p50 %s p99 %s (%d bytes), filtered p99 %s; restart of every replica to all synced %s",
		n, replicas, elapsed.Round(time.Second), strings.Join(lines, "; "), requests, strings.Join(byUse, ", "),
		perProbe, probeReadyInterval, perProbe/probeReadyInterval.Minutes(), factsListings, factsInterval, factsListings/factsInterval.Minutes(),
		wholeP50.Round(time.Microsecond), wholeP99.Round(time.Microsecond), wholeBytes, filteredP99.Round(time.Microsecond),
		restart.Round(time.Millisecond))
	// Probes and listings are rarer than the idle window: added at their
	// own rates (test/benchreport holds the targets).
	b.ReportMetric(requests+perProbe/probeReadyInterval.Minutes()+factsListings/factsInterval.Minutes(), "steady-requests/env/min")
}

// agentHeartbeat is SG_DCM_AGENT_HEARTBEAT_INTERVAL's default.
const agentHeartbeat = 30 * time.Second

// readyAgents counts the control plane's ready agents.
func readyAgents(cp *controlplane.ControlPlane) int {
	n := 0
	for _, a := range cp.Agents() {
		if a.HealthStatus == controlplane.HealthReady {
			n++
		}
	}
	return n
}

// fleetQueryTimes asks c for path times times and returns how long each
// answer took to arrive whole, and the size of the last.
func fleetQueryTimes(b *testing.B, c client, path string, times int) ([]time.Duration, int64) {
	b.Helper()
	var took []time.Duration
	var size int64
	for range times {
		start := time.Now()
		resp := c.get(path)
		var err error
		size, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		took = append(took, time.Since(start))
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
	}
	return took, size
}

// answeredEnvironments GETs path, a class query answered in one page, and
// returns the environments its classes name.
func answeredEnvironments(b *testing.B, c client, path string) map[string]bool {
	b.Helper()
	resp := c.get(path)
	defer func() { _ = resp.Body.Close() }()
	var page struct {
		StorageClasses []fleetClass `json:"storage_classes"`
		NextPageToken  string       `json:"next_page_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK || page.NextPageToken != "" {
		b.Fatalf("GET %s: %d, next page %q, %v", path, resp.StatusCode, page.NextPageToken, err)
	}
	envs := map[string]bool{}
	for _, class := range page.StorageClasses {
		for _, d := range class.Environments {
			envs[d.EnvironmentID] = true
		}
	}
	return envs
}

// registerTenants registers every tenant as an environment, 8 at a time,
// connected to its API server directly (no test cuts them off).
func registerTenants(b testing.TB, c client, tenants [][]harness.Tenant) {
	b.Helper()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for i, cluster := range clusters {
		for _, t := range tenants[i] {
			kc, err := cluster.DirectTenantKubeconfig(t)
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

// metricFamilies is one scrape of the gateway's /metrics.
type metricFamilies map[string]*dto.MetricFamily

// scrape reads the gateway's /metrics: the families named, or every one
// when none is. A loop polling for one family names it: the whole
// exposition of a large fleet costs the gateway and the benchmark more CPU
// to write and read than the work a benchmark waits for, and would count
// as part of it.
func scrape(tb testing.TB, c client, names ...string) metricFamilies {
	tb.Helper()
	query := url.Values{"name[]": names}
	req, err := http.NewRequestWithContext(tb.Context(), http.MethodGet, c.base+"/metrics?"+query.Encode(), nil)
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
