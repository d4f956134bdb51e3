package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/internal/fleet/fleettest"
)

// classesPerEnvironment is the fleet benchmark's class count (SPEC §2.3
// sizing: 10 classes per environment).
const classesPerEnvironment = 10

// fleetHandler is the gateway's HTTP handler over an index of n
// environments × 10 classes, fed through Observe (the path informer changes
// take); every tenth environment is then marked stale when unreachable is
// set, as the feed does for a cluster it lost.
func fleetHandler(b *testing.B, n int, unreachable bool) http.Handler {
	b.Helper()
	ix := fleet.NewIndex()
	metas := make([]fleet.Meta, n)
	for i := range metas {
		metas[i] = fleet.Meta{ID: fmt.Sprintf("env-%04d", i), Region: []string{"east", "west"}[i%2], Zone: "z1"}
	}
	ix.SetEnvironments(metas)
	now := time.Now()
	for i, m := range metas {
		ix.Observe(m.ID, fleettest.Objects(classesPerEnvironment, int64(100+i)), now)
		if unreachable && i%10 == 0 {
			ix.MarkStale(m.ID, now)
		}
	}
	logger := slog.New(slog.DiscardHandler)
	return api.New(api.Options{Logger: logger, Metrics: prometheus.NewRegistry(), Fleet: ix, Auth: testAuth(b), Audit: testAudit(nil, logger)})
}

// discard is a ResponseWriter that keeps only the status and size, so the
// benchmark measures the handler, not a recorder's buffer growth.
type discard struct {
	header http.Header
	code   int
	size   int
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) WriteHeader(code int)        { d.code = code }
func (d *discard) Write(p []byte) (int, error) { d.size += len(p); return len(p), nil }

// serve times one request with token (none if empty) and checks its answer.
func serve(b *testing.B, h http.Handler, path, token string) time.Duration {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Host = "127.0.0.1"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := &discard{header: http.Header{}}
	start := time.Now()
	h.ServeHTTP(w, req)
	took := time.Since(start)
	if w.code != http.StatusOK || w.size == 0 {
		b.Fatalf("GET %s: status %d, %d bytes", path, w.code, w.size)
	}
	return took
}

// countDetails decodes one answer and counts its per-environment details.
func countDetails(b *testing.B, h http.Handler, path string) int {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	h.ServeHTTP(rec, req)
	var list api.StorageClassList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		b.Fatalf("GET %s: %d %v", path, rec.Code, err)
	}
	n := 0
	for _, c := range list.StorageClasses {
		n += len(c.Environments)
	}
	return n
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkFleetQuery measures fleet StorageClass queries in-process (HTTP
// routing, request validation, the query, the JSON answer) with 100 and
// 1,000 environments × 10 classes. Each iteration asks the same question of
// an index whose environments are all live and of one where 10% are
// unreachable (stale), alternating so both see the same machine noise; the
// unreachable/live p99 ratio is the cost of dead clusters (target ≤ 1.10).
// Queries: the whole fleet (every class with every environment's details:
// 10,000 details at 1,000 environments) and a placement question
// (RWX-capable, expandable, in one region).
//
// go test ./internal/api -run '^$' -bench FleetQuery -benchtime 1000x -count 3
func BenchmarkFleetQuery(b *testing.B) {
	queries := map[string]string{
		"all":       "/api/v1alpha1/storage-classes",
		"placement": "/api/v1alpha1/storage-classes?access_mode=ReadWriteMany&expandable=true&region=east",
	}
	for _, n := range []int{100, 1000} {
		live, dead := fleetHandler(b, n, false), fleetHandler(b, n, true)
		for _, h := range []http.Handler{live, dead} {
			if got := countDetails(b, h, queries["all"]); got != n*classesPerEnvironment {
				b.Fatalf("the whole-fleet answer holds %d details, want %d", got, n*classesPerEnvironment)
			}
		}
		for _, q := range []string{"all", "placement"} {
			b.Run(fmt.Sprintf("envs=%d/query=%s", n, q), func(b *testing.B) {
				path := queries[q]
				serve(b, live, path, adminToken) // warm up
				serve(b, dead, path, adminToken)
				var liveTimes, deadTimes []time.Duration
				for i := 0; b.Loop(); i++ {
					if i%2 == 0 {
						liveTimes = append(liveTimes, serve(b, live, path, adminToken))
						deadTimes = append(deadTimes, serve(b, dead, path, adminToken))
					} else {
						deadTimes = append(deadTimes, serve(b, dead, path, adminToken))
						liveTimes = append(liveTimes, serve(b, live, path, adminToken))
					}
				}
				b.ReportMetric(ms(percentile(liveTimes, 0.50)), "p50-ms")
				b.ReportMetric(ms(percentile(liveTimes, 0.99)), "p99-ms")
				b.ReportMetric(ms(percentile(deadTimes, 0.99)), "p99-10%unreachable-ms")
				b.ReportMetric(float64(percentile(deadTimes, 0.99))/float64(percentile(liveTimes, 0.99)), "p99-ratio-unreachable/live")
			})
		}
	}
}
