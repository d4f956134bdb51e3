package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/metrics"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/secrets"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// fleetShape is a synthetic fleet for the metrics' cardinality and scrape
// cost: every environment READY with expiring credentials (a bootstrap
// token), Classes StorageClasses of which one publishes capacity in
// Segments topology segments, and Volumes volumes (RUNNING, in the default
// class).
type fleetShape struct {
	Environments, Classes, Segments, Volumes int
}

// seriesPerEnvironment is what the gateway exports for one environment of
// the shape: up, credentials expiry, sync age; an info series per class;
// a capacity series per published segment; a count and a bytes series per
// (class, status) that has volumes.
func (s fleetShape) seriesPerEnvironment() int {
	volumeSeries := 0
	if s.Volumes > 0 {
		volumeSeries = 2
	}
	return 3 + s.Classes + s.Segments + volumeSeries
}

// scrapeFixture is a gateway built by New (the one assembly; nothing runs,
// so no cluster is dialled) over a database seeded with a fleet.
type scrapeFixture struct {
	gateway *Gateway
	db      *pgxpool.Pool
}

// newScrapeFixture seeds a fresh database with shape, as a gateway that
// watched it would have left it (registry rows, fleet snapshots, volume
// records), and builds a gateway over it, with settings over the fixture's.
func newScrapeFixture(tb testing.TB, shape fleetShape, settings ...map[string]string) *scrapeFixture {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	database := pgtest.NewDatabase(tb)
	db, err := postgres.Open(ctx, database.URL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(db.Close)
	migrator, err := postgres.NewMigrator(db, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := migrator.Up(ctx); err != nil {
		tb.Fatal(err)
	}
	_ = migrator.Close()
	keys, err := secrets.NewKeyRing("k1")
	if err != nil {
		tb.Fatal(err)
	}
	if err := keys.WriteFile(filepath.Join(dir, "keyring.json")); err != nil {
		tb.Fatal(err)
	}
	seedFleet(tb, db, keys, shape)

	var tokens auth.TokenFile
	if _, _, err := tokens.Add("viewer", []auth.Role{auth.RoleViewer}, nil, time.Now()); err != nil {
		tb.Fatal(err)
	}
	if err := tokens.Write(filepath.Join(dir, "tokens.json")); err != nil {
		tb.Fatal(err)
	}
	vars := map[string]string{
		"SG_DATABASE_URL":         database.URL,
		"SG_KEY_RING_FILE":        filepath.Join(dir, "keyring.json"),
		"SG_AUTH_TOKEN_FILE":      filepath.Join(dir, "tokens.json"),
		"SG_STATE_DIR":            dir,
		"SG_EMBEDDED_NATS_LISTEN": config.EmbeddedNATSListenOff,
		"SG_SHUTDOWN_TIMEOUT":     "10s",
	}
	for _, more := range settings {
		maps.Copy(vars, more)
	}
	cfg, err := config.FromMap(vars)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	g, err := New(ctx, cfg, Options{Listener: ln, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(g.release)
	return &scrapeFixture{gateway: g, db: db}
}

// seedFleet writes shape's rows with COPY: the registry's environments
// (credentials sealed as the registry seals them), each one's storage
// objects as the fleet feed persists them, and the volume records.
func seedFleet(tb testing.TB, db *pgxpool.Pool, keys *secrets.KeyRing, shape fleetShape) {
	tb.Helper()
	ctx := context.Background()
	expiry := time.Now().Add(365 * 24 * time.Hour).UTC().Truncate(time.Second)
	observed := time.Now().Add(-time.Minute).UTC()
	objects, err := json.Marshal(storageObjects(shape))
	if err != nil {
		tb.Fatal(err)
	}
	var envRows, snapshotRows, volumeRows [][]any
	for i := range shape.Environments {
		id := fmt.Sprintf("env-%05d", i)
		sealed, err := keys.Seal(id, 1, []byte(`{"token":"seeded"}`))
		if err != nil {
			tb.Fatal(err)
		}
		envRows = append(envRows, []any{id, "storage", fmt.Sprintf("region-%d", i%10), fmt.Sprintf("zone-%d", i%30),
			"https://" + id + ".clusters.example.com", "token", sealed.KeyID, sealed.Blob, sealed.Generation, "READY", expiry})
		snapshotRows = append(snapshotRows, []any{id, objects, observed})
		for v := range shape.Volumes {
			spec := fmt.Sprintf(`{"namespace":"storage","storage_class":"class-0","capacity":"%dGi"}`, 1+v%4)
			volumeRows = append(volumeRows, []any{id, fmt.Sprintf("%s-vol-%d", id, v), "storage", []byte(spec), "RUNNING"})
		}
	}
	for _, table := range []struct {
		name    string
		columns []string
		rows    [][]any
	}{
		{"environments", []string{"id", "namespace", "region", "zone", "server", "auth_type", "credentials_key_id", "credentials",
			"credentials_generation", "state", "credentials_expire_time"}, envRows},
		{"fleet_snapshots", []string{"environment_id", "objects", "observed_time"}, snapshotRows},
		{"volumes", []string{"environment_id", "id", "namespace", "spec", "status"}, volumeRows},
	} {
		if _, err := db.CopyFrom(ctx, pgx.Identifier{table.name}, table.columns, pgx.CopyFromRows(table.rows)); err != nil {
			tb.Fatalf("seed %s: %v", table.name, err)
		}
	}
	// As autovacuum leaves tables after a bulk load (the volume counts are
	// read from an index, which needs the visibility map).
	if _, err := db.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		tb.Fatal(err)
	}
}

// storageObjects are one environment's classes: class-0 is the default and
// publishes its capacity per zone.
func storageObjects(shape fleetShape) capabilities.Objects {
	var objs capabilities.Objects
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	expand := true
	for c := range shape.Classes {
		class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("class-%d", c)},
			Provisioner: "disk.csi.example.com", VolumeBindingMode: &wffc, AllowVolumeExpansion: &expand}
		if c == 0 {
			class.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
		}
		objs.Classes = append(objs.Classes, class)
	}
	for s := range shape.Segments {
		capacity := resource.MustParse(fmt.Sprintf("%dTi", 1+s))
		objs.Capacities = append(objs.Capacities, &storagev1.CSIStorageCapacity{
			ObjectMeta:       metav1.ObjectMeta{Name: fmt.Sprintf("capacity-%d", s), Namespace: "kube-system"},
			StorageClassName: "class-0", Capacity: &capacity,
			NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": fmt.Sprintf("z%d", s)}},
		})
	}
	return objs
}

// scrapeSize asks /metrics as Prometheus 3 does by default (it asks for
// gzip too, which the gateway does not offer) and returns the body's size.
// The body is counted and dropped as it is written, as a socket would take
// it, so a benchmark measures the gateway's work only.
func (f *scrapeFixture) scrapeSize(tb testing.TB) int {
	tb.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"+
		"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"+
		"text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
	req.Header.Set("Accept-Encoding", "gzip")
	w := &countingWriter{header: http.Header{}}
	f.gateway.server.Handler.ServeHTTP(w, req)
	if w.code != http.StatusOK {
		tb.Fatalf("GET /metrics: %d", w.code)
	}
	return w.size
}

// series scrapes /metrics in the text format and returns how many series
// each family has: a histogram's buckets (+Inf among them), _sum and
// _count are series of their own, as a summary's quantiles, _sum and
// _count are.
func (f *scrapeFixture) series(tb testing.TB) map[string]int {
	tb.Helper()
	rec := httptest.NewRecorder()
	f.gateway.server.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	if rec.Code != http.StatusOK {
		tb.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body.String())
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		tb.Fatal(err)
	}
	series := map[string]int{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetHistogram() != nil:
				series[name] += len(m.GetHistogram().GetBucket()) + 2
			case m.GetSummary() != nil:
				series[name] += len(m.GetSummary().GetQuantile()) + 2
			default:
				series[name]++
			}
		}
	}
	return series
}

// countingWriter is a ResponseWriter that counts what it is given.
type countingWriter struct {
	header     http.Header
	code, size int
}

func (w *countingWriter) Header() http.Header { return w.header }

func (w *countingWriter) WriteHeader(code int) { w.code = code }

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.size += len(p)
	return len(p), nil
}

// TestFleetMetricsCardinality: 5,000 environments of 5 classes stay under
// 60,000 series, and volumes add none per volume.
func TestFleetMetricsCardinality(t *testing.T) {
	shape := fleetShape{Environments: 5000, Classes: 5, Segments: 1, Volumes: 20}
	f := newScrapeFixture(t, shape)
	series := f.series(t)
	total, fleetSeries := 0, 0
	for name, n := range series {
		total += n
		if strings.HasPrefix(name, "storage_gateway_environment_") || strings.HasPrefix(name, "storage_gateway_storage_class_") ||
			strings.HasPrefix(name, "storage_gateway_volume") {
			fleetSeries += n
		}
	}
	if want := shape.Environments * shape.seriesPerEnvironment(); fleetSeries != want {
		t.Errorf("fleet series %d, want %d (%d per environment): %v", fleetSeries, want, shape.seriesPerEnvironment(), series)
	}
	if total >= 60000 {
		t.Errorf("%d series for %d environments × %d classes, want under 60,000", total, shape.Environments, shape.Classes)
	}
	t.Logf("%d series in all, %d of them the fleet's", total, fleetSeries)

	// Ten times the volumes in the same classes and statuses, in a tenth of
	// the environments: not one series more.
	var more [][]any
	for i := 0; i < shape.Environments; i += 10 {
		for v := range 9 * shape.Volumes {
			more = append(more, []any{fmt.Sprintf("env-%05d", i), fmt.Sprintf("more-%d", v), "storage",
				[]byte(`{"namespace":"storage","storage_class":"class-0","capacity":"5Gi"}`), "RUNNING"})
		}
	}
	if _, err := f.db.CopyFrom(context.Background(), pgx.Identifier{"volumes"}, []string{"environment_id", "id", "namespace", "spec", "status"},
		pgx.CopyFromRows(more)); err != nil {
		t.Fatal(err)
	}
	after := f.series(t)
	for _, name := range []string{"storage_gateway_volumes", "storage_gateway_volume_requested_bytes"} {
		if after[name] != series[name] {
			t.Errorf("%s: %d series with %d volumes per environment, %d with %d", name, series[name], shape.Volumes, after[name], 10*shape.Volumes)
		}
	}
}

// BenchmarkMetricsScrape: one scrape of /metrics for 5,000 environments × 5
// classes (the cardinality test's fleet). Target: ≤ 250 ms. The baseline,
// in the same run, is the conventional exporter: each source a collector
// whose series are made const metrics at every scrape and served by a
// registry, which checks and sorts each of them (what package metrics
// avoids). The baseline also pays for the sources building their own
// series first, which a collector written for it would not: that part of
// the gap is measured apart as sources-ms/scrape.
func BenchmarkMetricsScrape(b *testing.B) {
	f := newScrapeFixture(b, fleetShape{Environments: 5000, Classes: 5, Segments: 1, Volumes: 20})
	conventional := prometheus.NewRegistry()
	// One collector per source, as an exporter would register them: the
	// registry collects them concurrently, as Gatherers gathers its sources.
	for _, source := range []prometheus.Gatherer{f.gateway.registry.Metrics(), f.gateway.index.Metrics(), f.gateway.volumes.Metrics()} {
		conventional.MustRegister(reCollector{source})
	}
	viaRegistry := promhttp.HandlerFor(conventional, promhttp.HandlerOpts{DisableCompression: true})
	measure := func(scrape func() int, rounds int) (time.Duration, int) {
		scrape() // warm the connections and caches
		var size int
		start := time.Now()
		for range rounds {
			size = scrape()
		}
		return time.Since(start) / time.Duration(rounds), size
	}
	sources := metrics.Gatherers{f.gateway.registry.Metrics(), f.gateway.index.Metrics(), f.gateway.volumes.Metrics()}
	var perScrape, baseline, gathering time.Duration
	var size, baselineSize int
	for b.Loop() {
		perScrape, size = measure(func() int { return f.scrapeSize(b) }, 5)
		baseline, baselineSize = measure(func() int {
			w := &countingWriter{header: http.Header{}}
			viaRegistry.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
			return w.size
		}, 5)
		gathering, _ = measure(func() int {
			if _, err := sources.Gather(); err != nil {
				b.Fatal(err)
			}
			return 0
		}, 5)
	}
	if baselineSize > size {
		b.Fatalf("the baseline served %d bytes, more than the gateway's whole answer (%d)", baselineSize, size)
	}
	b.ReportMetric(float64(perScrape.Microseconds())/1000, "ms/scrape")
	b.ReportMetric(float64(baseline.Microseconds())/1000, "registry-ms/scrape")
	b.ReportMetric(float64(perScrape)/float64(baseline), "x-registry")
	b.ReportMetric(float64(gathering.Microseconds())/1000, "sources-ms/scrape")
	b.ReportMetric(float64(size)/(1<<20), "MiB/scrape")
}

// reCollector serves a source's families through a registry, as const
// metrics built at every scrape.
type reCollector struct{ source prometheus.Gatherer }

// Describe describes nothing: an unchecked collector, as exporters of
// dynamic families register.
func (reCollector) Describe(chan<- *prometheus.Desc) {}

func (c reCollector) Collect(ch chan<- prometheus.Metric) {
	families, err := c.source.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		var names []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			names = append(names, l.GetName())
		}
		desc := prometheus.NewDesc(f.GetName(), f.GetHelp(), names, nil)
		values := make([]string, len(names))
		for _, m := range f.GetMetric() {
			for i, l := range m.GetLabel() {
				values[i] = l.GetValue()
			}
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, m.GetGauge().GetValue(), values...)
		}
	}
}
