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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/internal/fleet/fleettest"
)

// classesPerEnvironment is the fleet benchmark's class count: 10 classes
// per environment, a large site's.
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
		metas[i] = fleet.Meta{ID: fmt.Sprintf("env-%04d", i), Region: []string{"east", "west"}[i%2], Zone: "z1", State: "READY"}
	}
	ix.SetEnvironments(metas)
	now := time.Now()
	for i, m := range metas {
		objs := fleettest.Objects(classesPerEnvironment, int64(100+i))
		if i%2 == 1 { // half the namespaces have a storage quota, half of them nearly used up
			objs.Quotas = []*corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "storage", Namespace: "dcm"},
				Status: corev1.ResourceQuotaStatus{
					Hard: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("1Ti")},
					Used: corev1.ResourceList{corev1.ResourceRequestsStorage: *resource.NewQuantity(int64(1000-i%4*300)<<30, resource.BinarySI)},
				}}}
		}
		ix.Observe(m.ID, objs, now)
		ix.SetWritable(m.ID, true)
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

// answer sends one admin GET and decodes its 200 answer.
func answer[T any](b *testing.B, h http.Handler, path string) T {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	h.ServeHTTP(rec, req)
	var out T
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %v", path, rec.Code, err)
	}
	return out
}

// countDetails decodes one answer and counts its per-environment details.
func countDetails(b *testing.B, h http.Handler, path string) int {
	list := answer[api.StorageClassList](b, h, path)
	n := 0
	for _, c := range list.StorageClasses {
		n += len(c.Environments)
	}
	return n
}

// alternately times x and y once each to warm up, then once each per
// benchmark iteration, taking turns at going first so both see the same
// machine noise.
func alternately(b *testing.B, x, y func() time.Duration) (xs, ys []time.Duration) {
	x()
	y()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			xs = append(xs, x())
			ys = append(ys, y())
		} else {
			ys = append(ys, y())
			xs = append(xs, x())
		}
	}
	return xs, ys
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
				liveTimes, deadTimes := alternately(b,
					func() time.Duration { return serve(b, live, path, adminToken) },
					func() time.Duration { return serve(b, dead, path, adminToken) })
				b.ReportMetric(ms(percentile(liveTimes, 0.50)), "p50-ms")
				b.ReportMetric(ms(percentile(liveTimes, 0.99)), "p99-ms")
				b.ReportMetric(ms(percentile(deadTimes, 0.99)), "p99-10%unreachable-ms")
				b.ReportMetric(float64(percentile(deadTimes, 0.99))/float64(percentile(liveTimes, 0.99)), "p99-ratio-unreachable/live")
			})
		}
	}
}

// BenchmarkPlacement measures placement questions in-process (HTTP routing,
// request validation, the ranking, the JSON answer) over the fleet query
// benchmark's index — 1,000 environments × 10 classes, all live or 10%
// unreachable, half the namespaces with a storage quota — against the
// same question put to the fleet view as a filter (the baseline, timed
// alternately in the same run: what a dashboard asked before placement
// existed). Questions: "question" (100Gi, ReadWriteMany, Filesystem,
// expandable, in one region), the same with explain=true, and "broad"
// (10Gi, anything: every class of every environment a candidate). Target:
// p99 ≤ 5 ms each.
//
// go test ./internal/api -run '^$' -bench Placement -benchtime 1000x -count 3
func BenchmarkPlacement(b *testing.B) {
	const baseline = "/api/v1alpha1/storage-classes?access_mode=ReadWriteMany&volume_mode=Filesystem&expandable=true&region=east"
	questions := map[string]string{
		"question": "/api/v1alpha1/placements?capacity=100Gi&access_mode=ReadWriteMany&volume_mode=Filesystem&expandable=true&region=east",
		"explain":  "/api/v1alpha1/placements?capacity=100Gi&access_mode=ReadWriteMany&volume_mode=Filesystem&expandable=true&region=east&explain=true",
		"broad":    "/api/v1alpha1/placements?capacity=10Gi",
	}
	const n = 1000
	for _, unreachable := range []bool{false, true} {
		h := fleetHandler(b, n, unreachable)
		for _, q := range []string{"question", "explain", "broad"} {
			b.Run(fmt.Sprintf("envs=%d/unreachable=%v/%s", n, unreachable, q), func(b *testing.B) {
				path := questions[q]
				if got := candidates(b, h, path); got == 0 {
					b.Fatalf("GET %s: no candidates", path)
				}
				times, base := alternately(b,
					func() time.Duration { return serve(b, h, path, adminToken) },
					func() time.Duration { return serve(b, h, baseline, adminToken) })
				p99 := percentile(times, 0.99)
				b.ReportMetric(ms(percentile(times, 0.50)), "p50-ms")
				b.ReportMetric(ms(p99), "p99-ms")
				b.ReportMetric(ms(percentile(base, 0.99)), "baseline-p99-ms")
				b.ReportMetric(float64(p99)/float64(percentile(base, 0.99)), "p99-ratio-placement/fleet-filter")
				b.ReportMetric(float64(candidates(b, h, path)), "candidates")
			})
		}
	}
}

// candidates decodes one placement answer and counts its candidates.
func candidates(b *testing.B, h http.Handler, path string) int {
	return len(answer[api.Placement](b, h, path).Candidates)
}
