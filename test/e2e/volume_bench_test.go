package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// concurrentClients is how many callers create volumes at once.
const concurrentClients = 16

// benchClass is the harness class the create benchmarks use: WaitForFirstConsumer, so
// nothing provisions the claims while the benchmark runs.
const benchClass = "standard-wffc"

// createRound has concurrentClients callers each create perCaller volumes
// with create, and returns creates per second and every create's latency.
func createRound(b *testing.B, perCaller int, create func(id string) error) (float64, []time.Duration) {
	b.Helper()
	var mu sync.Mutex
	var latencies []time.Duration
	var failures []error
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrentClients {
		wg.Go(func() {
			for range perCaller {
				t0 := time.Now()
				err := create(uuid.NewString())
				mu.Lock()
				latencies = append(latencies, time.Since(t0))
				if err != nil {
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(failures) > 0 {
		b.Fatalf("%d of %d creates failed, first: %v", len(failures), len(latencies), failures[0])
	}
	return float64(len(latencies)) / elapsed.Seconds(), latencies
}

// finalRun reports whether this call of a benchmark is the one whose
// figures count: Go first runs every benchmark with b.N = 1, and stops
// there if that run failed, before the -benchtime N× run.
func finalRun(b *testing.B) bool {
	return b.N > 1 || flag.Lookup("test.benchtime").Value.String() == "1x"
}

// BenchmarkConcurrentCreates: 16 callers create volumes at once on one
// environment through the gateway (the real binary, production settings),
// against the same callers creating the same claims with
// client-go directly (no client-side limit) on the same cluster, in
// alternating rounds of the same run. Reports creates/s of both, their
// ratio (target ≥ 0.5) and p99 latencies (target: gateway ≤ direct + 15
// ms).
//
// Both create claims of a WaitForFirstConsumer class, which nothing
// provisions until a pod uses it, and each round starts once the previous
// round's claims are gone: otherwise the provisioning, binding and deletion
// a round sets off runs on the same two cores during the next round, and
// lands mostly in the slower path's rounds (measured: the API server spent
// 3.7× the CPU per claim in gateway rounds, on claims created earlier). The
// callers keep their connections to the gateway open between requests, as
// client-go keeps its one HTTP/2 connection.
//
//	go test ./test/e2e -run '^$' -bench ConcurrentCreates -benchtime 4x
func BenchmarkConcurrentCreates(b *testing.B) {
	binary := gatewayproc.Binary(b)
	g := gatewayproc.Start(b, binary, gatewayproc.Env(b, binary, "SG_DATABASE_URL="+pgtest.NewDatabase(b).URL,
		"SG_ALLOWED_CLUSTER_CIDRS=127.0.0.0/8", "SG_EMBEDDED_NATS_LISTEN=off"))
	c := client{t: b, base: "http://" + g.Addr, token: g.Token(),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrentClients}}}
	east := clusters[0]
	c.register(east)
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace
	cfg := east.AdminConfig()
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit: the cluster's own pace
	direct, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	claims := direct.CoreV1().PersistentVolumeClaims(ns)
	const perCaller = 10
	viaGateway := func(id string) error {
		code, body, err := c.try(http.MethodPost, volumesPath(envID)+"?id="+id, map[string]any{"spec": storageSpec("bench", "1Gi", map[string]any{"storage_class": benchClass})})
		if err != nil {
			return err
		}
		if code != http.StatusCreated {
			return fmt.Errorf("%d %v", code, body)
		}
		return nil
	}
	viaClientGo := func(id string) error {
		_, err := claims.Create(context.Background(), &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: id, Labels: map[string]string{"bench": "direct"}},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(benchClass), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{})
		return err
	}
	cleanUp := func() {
		for _, sel := range []string{"bench=direct", "dcm.project/managed-by=dcm"} {
			if err := claims.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
				b.Fatal(err)
			}
		}
		poll.Until(b, time.Minute, "the round's claims gone", func() bool {
			list, err := claims.List(context.Background(), metav1.ListOptions{})
			return err == nil && len(list.Items) == 0
		})
	}
	var gwRates, directRates []float64
	var gwLatencies, directLatencies []time.Duration
	b.ResetTimer()
	for range b.N {
		rate, lat := createRound(b, perCaller, viaGateway)
		gwRates, gwLatencies = append(gwRates, rate), append(gwLatencies, lat...)
		rate, lat = createRound(b, perCaller, viaClientGo)
		directRates, directLatencies = append(directRates, rate), append(directLatencies, lat...)
		b.StopTimer()
		cleanUp()
		b.StartTimer()
	}
	b.StopTimer()
	mean := func(v []float64) float64 {
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		return sum / float64(len(v))
	}
	gw, dr := mean(gwRates), mean(directRates)
	_, gw99 := percentiles(gwLatencies)
	_, dr99 := percentiles(directLatencies)
	b.ReportMetric(gw, "gateway-creates/s")
	b.ReportMetric(dr, "direct-creates/s")
	b.ReportMetric(gw/dr, "gateway/direct")
	b.ReportMetric(float64(gw99.Microseconds())/1000, "gateway-p99-ms")
	b.ReportMetric(float64(dr99.Microseconds())/1000, "direct-p99-ms")
	b.Logf("gateway %.0f creates/s (p99 %s), client-go directly %.0f/s (p99 %s): %.2f", gw, gw99, dr, dr99, gw/dr)
	if !finalRun(b) {
		return
	}
	if gw/dr < 0.5 {
		b.Errorf("the gateway reached %.0f%% of direct client-go's creates/s; target ≥ 50%%", 100*gw/dr)
	}
	if gw99 > dr99+15*time.Millisecond {
		b.Errorf("gateway create p99 %s, direct %s: more than 15 ms above", gw99, dr99)
	}
}
