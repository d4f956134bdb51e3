package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/harness"
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

// volumeBench is the real binary at production settings with the east
// cluster registered, and client-go straight to the same cluster — the two
// sides of the volume benchmarks. Both reach the API server at its own
// address with the gateway's least-privilege ServiceAccount token, so the
// cluster does the same work for each request on either side (the harness's
// cuttable proxy, in this process, and a system:masters identity, which
// skips authorization, would each favour one side), and client-go runs
// without a client-side limit: at the cluster's own pace.
type volumeBench struct {
	b      *testing.B
	c      client
	envID  string
	claims typedcorev1.PersistentVolumeClaimInterface
	// hop is client-go through a bare reverse proxy (see hopClaims).
	hop typedcorev1.PersistentVolumeClaimInterface
	// admin cleans up between rounds.
	admin typedcorev1.PersistentVolumeClaimInterface
}

func newVolumeBench(b *testing.B) *volumeBench {
	binary := gatewayproc.Binary(b)
	g := gatewayproc.Start(b, binary, gatewayproc.Env(b, binary, "SG_DATABASE_URL="+pgtest.NewDatabase(b).URL,
		"SG_ALLOWED_CLUSTER_CIDRS=127.0.0.0/8", "SG_EMBEDDED_NATS_LISTEN=off"))
	c := client{t: b, base: "http://" + g.Addr, token: g.Token(),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrentClients}}}
	east := clusters[0]
	ns := east.Spec.Environment.Namespace
	kc, err := harness.TokenKubeconfig(east.Name(), east.DirectServerURL(), east.CAData(), east.GatewayToken(), ns)
	if err != nil {
		b.Fatal(err)
	}
	c.registerWith(east, kc)
	direct, err := kubernetes.NewForConfig(&rest.Config{Host: east.DirectServerURL(), BearerToken: east.GatewayToken(),
		TLSClientConfig: rest.TLSClientConfig{CAData: east.CAData()}, QPS: -1})
	if err != nil {
		b.Fatal(err)
	}
	return &volumeBench{b: b, c: c, envID: east.Spec.Environment.ID, claims: direct.CoreV1().PersistentVolumeClaims(ns),
		hop: hopClaims(b, east), admin: east.AdminClient().CoreV1().PersistentVolumeClaims(ns)}
}

// hopClaims is client-go reaching c's API server through a bare reverse
// proxy in this process (net/http/httputil) with the gateway's token: plain
// HTTP in, as the benchmarks reach the gateway, and HTTP/2 over TLS out.
// Its creates cost the machine what putting any HTTP service in front of
// the cluster costs, without anything the gateway does: the floor beside
// the gateway's figure.
func hopClaims(b *testing.B, c *harness.Cluster) typedcorev1.PersistentVolumeClaimInterface {
	target, err := url.Parse(c.DirectServerURL())
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(c.CAData())
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	srv := httptest.NewServer(proxy)
	b.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: c.GatewayToken(), QPS: -1})
	if err != nil {
		b.Fatal(err)
	}
	return cs.CoreV1().PersistentVolumeClaims(c.Spec.Environment.Namespace)
}

// viaGateway creates volume id through the gateway's API, as DCM does.
func (vb *volumeBench) viaGateway(id string) error {
	code, body, err := vb.c.try(http.MethodPost, volumesPath(vb.envID)+"?id="+id, map[string]any{"spec": storageSpec("bench", "1Gi", map[string]any{"storage_class": benchClass})})
	if err != nil {
		return err
	}
	if code != http.StatusCreated {
		return fmt.Errorf("%d %v", code, body)
	}
	return nil
}

// viaClientGo creates the same claim with client-go.
func (vb *volumeBench) viaClientGo(id string) error { return createClaim(vb.claims, id) }

// viaHop creates the same claim with client-go through the bare proxy.
func (vb *volumeBench) viaHop(id string) error { return createClaim(vb.hop, id) }

// createClaim creates the claim the client-go sides create.
func createClaim(claims typedcorev1.PersistentVolumeClaimInterface, id string) error {
	_, err := claims.Create(context.Background(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: id, Labels: map[string]string{"bench": "direct"}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(benchClass), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{})
	return err
}

// cleanUp deletes every claim of both sides and waits until they are gone
// and the gateway has recorded and published their deletion: the next round
// starts on a machine that is done with this one.
func (vb *volumeBench) cleanUp() {
	for _, sel := range []string{"bench=direct", "dcm.project/managed-by=dcm"} {
		if err := vb.admin.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
			vb.b.Fatal(err)
		}
	}
	poll.Until(vb.b, time.Minute, "the round's claims gone", func() bool {
		list, err := vb.admin.List(context.Background(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
	poll.Until(vb.b, time.Minute, "the gateway's volumes DELETED and their events published", func() bool {
		code, body, err := vb.c.try(http.MethodGet, volumesPath(vb.envID)+"?max_page_size=1", nil)
		if err != nil || code != http.StatusOK || len(body["volumes"].([]any)) > 0 {
			return false
		}
		m := scrape(vb.b, vb.c, "storage_gateway_outbox_depth")
		_, reported := m["storage_gateway_outbox_depth"]
		return reported && m.sum("storage_gateway_outbox_depth") == 0
	})
}

// BenchmarkConcurrentCreates: 16 callers create volumes at once on one
// environment through the gateway (the real binary, production settings),
// against the same callers creating the same claims with client-go
// directly (no client-side limit) and with client-go through a bare
// reverse proxy (hopClaims), on the same cluster, in rounds of the same
// run; each side goes first in turn. Reports creates/s of each, the
// gateway's and the proxy's share of direct's, and p99 latencies
// (test/benchreport judges them).
//
// All create claims of a WaitForFirstConsumer class, which nothing
// provisions until a pod uses it (a round's claims cost the next round only
// the event writes below while they wait), and each set of rounds starts
// once the previous set's claims are gone: otherwise the provisioning,
// binding and deletion a round sets off runs on the same two cores during
// the next round, and lands mostly in the slower path's rounds (measured:
// the API server spent 3.7× the CPU per claim in gateway rounds, on claims
// created earlier). The callers keep their connections to the gateway open
// between requests, as client-go keeps its one HTTP/2 connection.
//
// It also reports the CPU time every program on the machine spent per
// create on each side (from /proc): where the cluster, the gateway and
// Postgres share the machine's cores and every side keeps them busy, the
// throughput ratio cannot exceed the ratio of those totals. The proxy says
// how much of the gap any HTTP service in front of the cluster would cost.
//
// The cluster's share per side is not only that side's cost. While a claim
// of the class waits, the controller manager's volume binder reports it
// (an Event, then updates of its count) at every resync, each second here,
// up to its spam filter's 25 per claim, and writes them at its client
// limit of 20 a second: a round's claims keep the cluster writing events
// for minutes after they are gone (measured: 20 writes a second, about 0.15
// of a core, still 40 s after one round of 160 claims). That background
// runs at the same pace whichever side is creating, so a side's CPU per
// create carries more of it the longer its rounds take. The API server's
// metrics show the requests are the same on every side (one POST per
// create); a gateway's claim reaches one watch more (the gateway's own,
// which any service that reports status holds). The gateway's and
// Postgres's shares are its own.
//
//	go test ./test/e2e -run '^$' -bench ConcurrentCreates -benchtime 4x
func BenchmarkConcurrentCreates(b *testing.B) {
	vb := newVolumeBench(b)
	const perCaller = 10
	gw, direct, proxy := &createSide{create: vb.viaGateway}, &createSide{create: vb.viaClientGo}, &createSide{create: vb.viaHop}
	sides := []*createSide{gw, direct, proxy}
	b.ResetTimer()
	for i := range b.N {
		for j := range sides {
			sides[(i+j)%len(sides)].round(b, perCaller)
		}
		b.StopTimer()
		vb.cleanUp()
		b.StartTimer()
	}
	b.StopTimer()
	_, gw99 := percentiles(gw.latencies)
	_, dr99 := percentiles(direct.latencies)
	b.ReportMetric(gw.rate(), "gateway-creates/s")
	b.ReportMetric(direct.rate(), "direct-creates/s")
	b.ReportMetric(proxy.rate(), "proxy-creates/s")
	b.ReportMetric(gw.rate()/direct.rate(), "gateway/direct")
	b.ReportMetric(proxy.rate()/direct.rate(), "proxy/direct")
	b.ReportMetric(float64(gw99.Microseconds())/1000, "gateway-p99-ms")
	b.ReportMetric(float64(dr99.Microseconds())/1000, "direct-p99-ms")
	b.Logf("gateway %.0f creates/s (p99 %s), client-go directly %.0f/s (p99 %s): %.2f; through a bare proxy %.0f/s: %.2f",
		gw.rate(), gw99, direct.rate(), dr99, gw.rate()/direct.rate(), proxy.rate(), proxy.rate()/direct.rate())
	for _, side := range []struct {
		name string
		*createSide
	}{{"gateway", gw}, {"direct", direct}, {"proxy", proxy}} {
		b.ReportMetric(msPer(totalCPU(side.cpu), len(side.latencies)), side.name+"-cpu-ms/create")
		b.Logf("%s: %s", side.name, perOperation(side.cpu, len(side.latencies)))
	}
}

// createSide is one way BenchmarkConcurrentCreates creates claims, and what
// its rounds measured.
type createSide struct {
	create    func(id string) error
	rates     []float64
	latencies []time.Duration
	cpu       map[string]time.Duration // by program
}

// round runs one round of creates of this side.
func (s *createSide) round(b *testing.B, perCaller int) {
	before := cpuByProgram(b)
	rate, latencies := createRound(b, perCaller, s.create)
	if s.cpu == nil {
		s.cpu = map[string]time.Duration{}
	}
	cpuSpent(s.cpu, before, cpuByProgram(b))
	s.rates, s.latencies = append(s.rates, rate), append(s.latencies, latencies...)
}

// rate is the side's mean creates per second over its rounds.
func (s *createSide) rate() float64 {
	sum := 0.0
	for _, r := range s.rates {
		sum += r
	}
	return sum / float64(len(s.rates))
}

// BenchmarkVolumeOperations: DCM's single requests one after another —
// create, get and a list of up to 50 — through the gateway (the real binary,
// production settings) against the same operations with client-go straight
// to the cluster, interleaved in one run. Reports p50 and p99 of each and
// the gateway's p50 as a ratio of client-go's. A get and a list are served
// from the gateway's records and caches; a create waits on the cluster and
// on the gateway's database.
//
//	go test ./test/e2e -run '^$' -bench VolumeOperations -benchtime 100x
func BenchmarkVolumeOperations(b *testing.B) {
	vb := newVolumeBench(b)
	ops := []string{"create", "get", "list"}
	gateway, direct := map[string][]time.Duration{}, map[string][]time.Duration{}
	timed := func(into map[string][]time.Duration, op string, do func() error) {
		start := time.Now()
		if err := do(); err != nil {
			b.Fatalf("%s: %v", op, err)
		}
		into[op] = append(into[op], time.Since(start))
	}
	gatewayRead := func(path string) func() error {
		return func() error {
			code, body, err := vb.c.try(http.MethodGet, path, nil)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("%d %v", code, body)
			}
			return err
		}
	}
	b.ResetTimer()
	for range b.N {
		id := uuid.NewString()
		timed(gateway, "create", func() error { return vb.viaGateway(id) })
		timed(direct, "create", func() error { return vb.viaClientGo(id + "-direct") })
		timed(gateway, "get", gatewayRead(volumesPath(vb.envID)+"/"+id))
		timed(direct, "get", func() error {
			_, err := vb.claims.Get(context.Background(), id+"-direct", metav1.GetOptions{})
			return err
		})
		timed(gateway, "list", gatewayRead(volumesPath(vb.envID)+"?max_page_size=50"))
		timed(direct, "list", func() error {
			_, err := vb.claims.List(context.Background(), metav1.ListOptions{LabelSelector: "bench=direct", Limit: 50})
			return err
		})
	}
	b.StopTimer()
	vb.cleanUp()
	var summary []string
	for _, op := range ops {
		g50, g99 := percentiles(gateway[op])
		d50, d99 := percentiles(direct[op])
		b.ReportMetric(float64(g50.Microseconds())/1000, op+"-p50-ms")
		b.ReportMetric(float64(g99.Microseconds())/1000, op+"-p99-ms")
		b.ReportMetric(float64(d50.Microseconds())/1000, op+"-direct-p50-ms")
		b.ReportMetric(float64(g50)/float64(d50), op+"-p50-gateway/direct")
		summary = append(summary, fmt.Sprintf("%s p50/p99 %s/%s vs %s/%s (p50 ×%.2f)", op,
			g50.Round(10*time.Microsecond), g99.Round(10*time.Microsecond), d50.Round(10*time.Microsecond), d99.Round(10*time.Microsecond), float64(g50)/float64(d50)))
	}
	b.Logf("%d of each, gateway vs client-go: %s", len(gateway["create"]), strings.Join(summary, "; "))
}
