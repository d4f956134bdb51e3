package clusters_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// fast are health settings that make the tests quick; the defaults' bounds
// are checked by TestDefaultsMeetTheSpecDetectionBounds.
var fast = clusters.PoolOptions{
	SyncTimeout:      10 * time.Second,
	HealthInterval:   500 * time.Millisecond,
	HealthTimeout:    500 * time.Millisecond,
	FailureThreshold: 2,
}

// cacheRead is far more than a cached read takes and far less than a round
// trip to a cut or dead cluster.
const cacheRead = 50 * time.Millisecond

func newPool(t *testing.T, opts clusters.PoolOptions) *clusters.Pool {
	t.Helper()
	opts.Client.Egress = loopback
	p := clusters.NewPool(opts)
	t.Cleanup(p.Close)
	return p
}

func eastTarget(id string) clusters.Target {
	return clusters.Target{
		EnvironmentID: id,
		Connection:    kubeconfig.Connection{Server: east.ServerURL(), CAData: east.CAData(), Token: east.GatewayToken()},
		Namespaces:    east.Spec.Environment.Namespaces(),
	}
}

// ensureReady adds t to p and waits until its caches serve.
func ensureReady(t *testing.T, p *clusters.Pool, target clusters.Target) *clusters.Cluster {
	t.Helper()
	if err := p.Ensure(target); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 15*time.Second, target.EnvironmentID+" READY and synced", func() bool {
		c, ok := p.Get(target.EnvironmentID)
		return ok && c.Health().State == clusters.HealthReady && c.Health().Synced
	})
	c, _ := p.Get(target.EnvironmentID)
	return c
}

func claim(name string, labels, annotations map[string]string) *corev1.PersistentVolumeClaim {
	class := "standard-wffc" // binds only with a pod: no provisioning noise
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

var managed = map[string]string{clusters.ManagedByLabel: clusters.ManagedByValue}

// createClaim creates a PVC as an admin and deletes it when the test ends.
func createClaim(t *testing.T, namespace string, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvcs := east.AdminClient().CoreV1().PersistentVolumeClaims(namespace)
	created, err := pvcs.Create(t.Context(), pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pvcs.Delete(context.Background(), pvc.Name, metav1.DeleteOptions{}) })
	return created
}

func warning(namespace, pvcName, name, eventType string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace, Name: pvcName},
		Type:           eventType,
		Reason:         "ProvisioningFailed",
		Message:        name,
		Source:         corev1.EventSource{Component: "pool-test"},
		FirstTimestamp: metav1.NewTime(at),
		LastTimestamp:  metav1.NewTime(at),
		Count:          1,
	}
}

func names[T metav1.Object](objs []T) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.GetName()
	}
	return out
}

func TestPoolServesReadsFromCaches(t *testing.T) {
	ctx := t.Context()
	admin := east.AdminClient()
	ns := east.Spec.Environment.Namespace
	p := newPool(t, fast)
	c := ensureReady(t, p, eastTarget("pool-reads"))

	lastApplied := map[string]string{corev1.LastAppliedConfigAnnotation: `{"huge":"copy"}`, "keep": "me"}
	created := createClaim(t, ns, claim("pool-reads-managed", managed, lastApplied))
	createClaim(t, ns, claim("pool-reads-foreign", nil, nil))
	if len(created.ManagedFields) == 0 {
		t.Fatal("the API server set no managed fields; the stripping check below would prove nothing")
	}
	events := admin.CoreV1().Events(ns)
	now := time.Now().Truncate(time.Second)
	for _, e := range []*corev1.Event{
		warning(ns, created.Name, "pool-reads-older", corev1.EventTypeWarning, now.Add(-time.Minute)),
		warning(ns, created.Name, "pool-reads-newer", corev1.EventTypeWarning, now),
		warning(ns, created.Name, "pool-reads-normal", corev1.EventTypeNormal, now),
		warning(ns, "pool-reads-foreign", "pool-reads-other-claim", corev1.EventTypeWarning, now),
	} {
		if _, err := events.Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = events.Delete(context.Background(), e.Name, metav1.DeleteOptions{}) })
	}

	poll.Until(t, 10*time.Second, "the managed PVC in the cache", func() bool { _, ok := c.PVC(ns, created.Name); return ok })
	t.Run("PVCs", func(t *testing.T) {
		pvc, _ := c.PVC(ns, created.Name)
		if pvc.ManagedFields != nil || pvc.Annotations[corev1.LastAppliedConfigAnnotation] != "" || pvc.Annotations["keep"] != "me" {
			t.Errorf("cached PVC metadata = managedFields %v, annotations %v; want both stripped, other annotations kept", pvc.ManagedFields, pvc.Annotations)
		}
		if _, ok := c.PVC(ns, "pool-reads-foreign"); ok {
			t.Error("a PVC without the DCM label is cached")
		}
		if _, ok := c.PVC("kube-system", created.Name); ok {
			t.Error("PVC answers for a namespace outside the environment")
		}
		all := c.PVCs()
		if !slices.Contains(names(all), created.Name) || slices.Contains(names(all), "pool-reads-foreign") {
			t.Errorf("PVCs() = %v, want the managed claim and not the foreign one", names(all))
		}
		for _, pvc := range all {
			if pvc.Labels[clusters.ManagedByLabel] != clusters.ManagedByValue {
				t.Errorf("PVCs() returned %s/%s without the DCM label", pvc.Namespace, pvc.Name)
			}
		}
	})
	t.Run("storage", func(t *testing.T) {
		classes, err := admin.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := names(ptrs(classes.Items))
		slices.Sort(want)
		if got := names(c.StorageClasses()); !slices.Equal(got, want) {
			t.Errorf("StorageClasses() = %v, want %v", got, want)
		}
		if def, ok := c.DefaultStorageClass(); !ok || def.Name != "standard" {
			t.Errorf("DefaultStorageClass() = %v, %v; want standard", def, ok)
		}
		if class, ok := c.StorageClass("archive"); !ok || class.ManagedFields != nil {
			t.Errorf("StorageClass(archive) = %v, %v; want it, without managed fields", class, ok)
		}
		if !slices.ContainsFunc(c.CSIDrivers(), func(d *storagev1.CSIDriver) bool { return d.Name == "disk.csi.local.dev" }) {
			t.Error("CSIDriver disk.csi.local.dev not found")
		}
		capacities, err := admin.StorageV1().CSIStorageCapacities("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.CSIStorageCapacities(); len(got) != len(capacities.Items) || len(got) == 0 {
			t.Errorf("CSIStorageCapacities() has %d objects, the cluster %d", len(got), len(capacities.Items))
		}
	})
	t.Run("warning events", func(t *testing.T) {
		var got []string
		poll.Until(t, 10*time.Second, "both warnings cached", func() bool {
			got = names(c.WarningEvents(ns, created.Name))
			return slices.Contains(got, "pool-reads-older") && slices.Contains(got, "pool-reads-newer")
		})
		newer, older := slices.Index(got, "pool-reads-newer"), slices.Index(got, "pool-reads-older")
		if newer > older || slices.Contains(got, "pool-reads-normal") || slices.Contains(got, "pool-reads-other-claim") {
			t.Errorf("WarningEvents = %v; want only this claim's warnings, newest first", got)
		}
	})
	t.Run("newest default class wins", func(t *testing.T) {
		classes := admin.StorageV1().StorageClasses()
		time.Sleep(time.Second) // creation timestamps have second resolution
		newer := &storagev1.StorageClass{
			ObjectMeta:  metav1.ObjectMeta{Name: "pool-newer-default", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
			Provisioner: "disk.csi.local.dev",
		}
		if _, err := classes.Create(ctx, newer, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = classes.Delete(context.Background(), newer.Name, metav1.DeleteOptions{}) }()
		poll.Until(t, 10*time.Second, "the newer default class chosen", func() bool {
			def, ok := c.DefaultStorageClass()
			return ok && def.Name == newer.Name
		})
		if err := classes.Delete(ctx, newer.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "standard is the default again", func() bool {
			def, ok := c.DefaultStorageClass()
			return ok && def.Name == "standard"
		})
	})
	t.Run("events watched only while a claim is Pending", func(t *testing.T) {
		if !c.WatchingWarnings(ns) {
			t.Fatal("a claim is Pending and its namespace's warnings are not watched")
		}
		if err := admin.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "no claim Pending: the events watch stopped", func() bool { return !c.WatchingWarnings(ns) })
		if got := c.WarningEvents(ns, created.Name); len(got) != 0 {
			t.Errorf("WarningEvents after the events watch stopped = %v; want none", names(got))
		}
	})
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// healthLog records the states a subscriber of the pool's health changes
// reads, each change of state once.
type healthLog struct {
	mu     sync.Mutex
	states map[string][]clusters.HealthState
}

// subscribe runs handle for p's changes until the test ends.
func subscribe(t *testing.T, p *clusters.Pool, handle func(context.Context, clusters.Change)) {
	sub := p.Subscribe()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { sub.Run(ctx, handle) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// follow records p's health changes until the test ends.
func (l *healthLog) follow(t *testing.T, p *clusters.Pool) {
	subscribe(t, p, func(_ context.Context, c clusters.Change) {
		if h, ok := p.Health(c.EnvironmentID); ok && c.Kind == clusters.HealthChanged {
			l.record(c.EnvironmentID, h)
		}
	})
}

func (l *healthLog) record(env string, h clusters.Health) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.states == nil {
		l.states = map[string][]clusters.HealthState{}
	}
	if seen := l.states[env]; len(seen) == 0 || seen[len(seen)-1] != h.State {
		l.states[env] = append(seen, h.State)
	}
}

func (l *healthLog) of(env string) []clusters.HealthState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states[env])
}

// stall subscribes to p with a handler that hangs (a database write that
// never returns) until the test ends.
func stall(t *testing.T, p *clusters.Pool) {
	subscribe(t, p, func(ctx context.Context, _ clusters.Change) { <-ctx.Done() })
}

// TestPoolDetectsUnreachableAndRecovery: health changes are detected and
// published within the bounds, in order — also while another subscriber
// is stuck in its handler: delivery never runs on the cluster's goroutine.
func TestPoolDetectsUnreachableAndRecovery(t *testing.T) {
	var log healthLog
	opts := fast
	p := newPool(t, opts)
	stall(t, p)
	log.follow(t, p)
	ns := east.Spec.Environment.Namespace
	c := ensureReady(t, p, eastTarget("pool-unreachable"))
	pvc := createClaim(t, ns, claim("pool-unreachable-claim", managed, nil))
	poll.Until(t, 10*time.Second, "claim cached", func() bool { _, ok := c.PVC(ns, pvc.Name); return ok })

	// A good check is followed by another after the steady interval, a
	// failed one after the interval; a failing one ends within the timeout.
	detectBound := clusters.DetectionBound(opts)
	recoverBound := opts.HealthInterval + opts.HealthTimeout
	const slack = 2 * time.Second

	t.Cleanup(func() { east.SetReachable(true) })
	east.SetReachable(false)
	took := poll.Until(t, 60*time.Second, "UNREACHABLE", func() bool { return c.Health().State == clusters.HealthUnreachable })
	t.Logf("unreachable detected after %s (bound %s)", took, detectBound)
	if took > detectBound+slack {
		t.Errorf("unreachable detected after %s, want within %s", took, detectBound)
	}
	if h := c.Health(); !h.Synced || h.Message == "" {
		t.Errorf("health while cut = %+v; want a message and the caches still marked synced", h)
	}

	start := time.Now()
	_, found := c.PVC(ns, pvc.Name)
	classes := c.StorageClasses()
	if got, ok := p.Get("pool-unreachable"); !found || len(classes) == 0 || !ok || got != c {
		t.Errorf("reads while cut: claim found %v, %d classes, Get ok %v; want answers from the cache", found, len(classes), ok)
	}
	if d := time.Since(start); d > cacheRead {
		t.Errorf("reads while cut took %s; they must not touch the network", d)
	}

	east.SetReachable(true)
	took = poll.Until(t, 15*time.Second, "READY again", func() bool { return c.Health().State == clusters.HealthReady })
	t.Logf("recovery detected after %s (bound %s)", took, recoverBound)
	if took > recoverBound+slack {
		t.Errorf("recovery detected after %s, want within %s", took, recoverBound)
	}
	want := []clusters.HealthState{clusters.HealthReady, clusters.HealthUnreachable, clusters.HealthReady}
	if got := log.of("pool-unreachable"); !slices.Equal(got, want) {
		t.Errorf("published health changes %v, want %v", got, want)
	}
}

// TestABrokenWatchIsCheckedAtOnce: a cluster whose watch connection
// breaks is checked at once, not at the next steady check, so it is
// UNREACHABLE within the failed checks' interval and timeouts.
func TestABrokenWatchIsCheckedAtOnce(t *testing.T) {
	opts := fast
	opts.SteadyHealthInterval = time.Minute
	p := newPool(t, opts)
	c := ensureReady(t, p, eastTarget("pool-broken-watch"))
	bound := time.Duration(opts.FailureThreshold-1)*opts.HealthInterval + time.Duration(opts.FailureThreshold)*opts.HealthTimeout
	const slack = 2 * time.Second

	t.Cleanup(func() { east.SetReachable(true) })
	east.SetReachable(false) // closes every connection: the watches see the break
	took := poll.Until(t, 30*time.Second, "UNREACHABLE", func() bool { return c.Health().State == clusters.HealthUnreachable })
	t.Logf("unreachable detected after %s (bound %s, steady interval %s)", took, bound, opts.SteadyHealthInterval)
	if took > bound+slack {
		t.Errorf("unreachable detected after %s, want within %s", took, bound)
	}
	east.SetReachable(true)
	poll.Until(t, 15*time.Second, "READY again", func() bool { return c.Health().State == clusters.HealthReady })
}

// TestWatchesAndChecksShareOneConnection: a connected cluster's watches
// and health checks go over one connection, and a cluster cut off and
// back comes back on one again.
func TestWatchesAndChecksShareOneConnection(t *testing.T) {
	p := newPool(t, fast)
	c := ensureReady(t, p, eastTarget("pool-one-connection"))
	if n := c.OpenConnections(); n != 1 {
		t.Fatalf("%d connections open for a ready cluster; want 1", n)
	}
	t.Cleanup(func() { east.SetReachable(true) })
	east.SetReachable(false)
	poll.Until(t, 30*time.Second, "UNREACHABLE", func() bool { return c.Health().State == clusters.HealthUnreachable })
	east.SetReachable(true)
	poll.Until(t, 15*time.Second, "READY again", func() bool { return c.Health().State == clusters.HealthReady })
	poll.Until(t, 15*time.Second, "one connection again", func() bool { return c.OpenConnections() == 1 })
}

// TestAServerThatAnswersNotReadyKeepsItsConnection: a check that got an
// answer (here 500 from /readyz, as from an API server whose storage is
// down) fails without dropping the connection the watches share: only a
// check that got no answer dials afresh.
func TestAServerThatAnswersNotReadyKeepsItsConnection(t *testing.T) {
	var dials, checks atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			checks.Add(1)
		}
		http.Error(w, "not ready", http.StatusInternalServerError)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			dials.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p := newPool(t, fast)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := p.Ensure(clusters.Target{EnvironmentID: "pool-not-ready", Namespaces: []string{"dcm"},
		Connection: kubeconfig.Connection{Server: srv.URL, CAData: ca, Token: "t"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 15*time.Second, "four checks answered", func() bool { return checks.Load() >= 4 })
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections dialled for %d checks answered 500; want 1", n, checks.Load())
	}
}

// blackHole accepts connections and never answers, like a dead network path.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "https://" + ln.Addr().String()
}

// refusing is an address where nothing listens.
func refusing(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "https://" + addr
}

func TestDeadClustersDoNotDelayHealthyOnes(t *testing.T) {
	opts := fast
	opts.HealthTimeout = 5 * time.Second // dead clusters hold each check as long as possible
	opts.SyncTimeout = 30 * time.Second
	p := newPool(t, opts)

	// More dead environments than sync slots, added first.
	var dead []string
	for i := range 6 {
		server := blackHole(t)
		if i%2 == 1 {
			server = refusing(t)
		}
		target := eastTarget(fmt.Sprintf("pool-dead-%d", i))
		target.Connection.Server = server
		start := time.Now()
		if err := p.Ensure(target); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > cacheRead {
			t.Errorf("Ensure of a dead cluster took %s", d)
		}
		dead = append(dead, target.EnvironmentID)
	}
	if err := p.Ensure(eastTarget("pool-healthy")); err != nil {
		t.Fatal(err)
	}
	took := poll.Until(t, 5*time.Second, "the healthy cluster synced while dead ones are pending", func() bool {
		c, _ := p.Get("pool-healthy")
		return c.Health().Synced
	})
	t.Logf("healthy cluster synced %s after Ensure, behind %d dead ones", took, len(dead))

	for _, id := range dead {
		start := time.Now()
		c, ok := p.Get(id)
		if !ok {
			t.Fatalf("Get(%s) found nothing", id)
		}
		h := c.Health()
		pvcs, classes := c.PVCs(), c.StorageClasses()
		if d := time.Since(start); d > cacheRead {
			t.Errorf("Get and reads of dead %s took %s", id, d)
		}
		if h.Synced || h.State == clusters.HealthReady || len(pvcs)+len(classes) != 0 {
			t.Errorf("dead %s: health %+v, %d PVCs, %d classes", id, h, len(pvcs), len(classes))
		}
	}
}

// TestADyingClusterHoldsNoWorker: steady checks share a few workers
// (here one); a cluster that stops answering holds its worker for its first
// failed check only, and its later checks run apart, so another cluster's
// checks keep their pace while it stays dead.
func TestADyingClusterHoldsNoWorker(t *testing.T) {
	opts := fast
	opts.HealthInterval = 200 * time.Millisecond
	opts.SteadyHealthInterval = 200 * time.Millisecond
	opts.HealthTimeout = 2 * time.Second
	p := newPool(t, opts)
	clusters.SetHealthWorkers(p, 1)

	var checks atomic.Int32
	srv := http2Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			checks.Add(1)
			return
		}
		http.NotFound(w, r) // no caches: only its checks matter here
	}))
	if err := p.Ensure(clusters.Target{EnvironmentID: "pool-answering", Namespaces: []string{"dcm"},
		Connection: kubeconfig.Connection{Server: srv.URL, CAData: pemCert(srv.Certificate().Raw), Token: "t"}}); err != nil {
		t.Fatal(err)
	}
	dying := ensureReady(t, p, eastTarget("pool-dying"))
	poll.Until(t, 10*time.Second, "the answering cluster checked", func() bool { return checks.Load() >= 3 })

	t.Cleanup(func() { east.SetFrozen(false) })
	east.SetFrozen(true) // the dying cluster's checks now last their whole timeout
	// Its first failed check may hold the worker; after that it must not.
	time.Sleep(opts.HealthTimeout + opts.HealthInterval)
	before := checks.Load()
	const window = 4 * time.Second
	time.Sleep(window)
	got := int(checks.Load() - before)
	if h := dying.Health(); h.State != clusters.HealthUnreachable {
		t.Errorf("the frozen cluster is %s; want UNREACHABLE", h.State)
	}
	// One check per interval, give or take the tick; a worker held by
	// each of the dead cluster's checks leaves about one per timeout.
	if want := int(window / opts.SteadyHealthInterval / 2); got < want {
		t.Errorf("the answering cluster was checked %d times in %s while another was dead; want at least %d", got, window, want)
	}
}

func TestPoolSwapsConnectionsLive(t *testing.T) {
	ns, scratch := east.Spec.Environment.Namespace, east.Spec.Environment.AllowedNamespaces[0]
	rotated, err := east.NewGatewayToken(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		initial   func(clusters.Target) clusters.Target
		changed   func(clusters.Target) clusters.Target
		namespace string // where a claim created after the swap must show up
	}{
		{
			name:      "credential rotation",
			initial:   func(t clusters.Target) clusters.Target { return t },
			changed:   func(t clusters.Target) clusters.Target { t.Connection.Token = rotated; return t },
			namespace: ns,
		},
		{
			name:      "namespace added",
			initial:   func(t clusters.Target) clusters.Target { t.Namespaces = []string{ns}; return t },
			changed:   func(t clusters.Target) clusters.Target { t.Namespaces = []string{ns, scratch}; return t },
			namespace: scratch,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, fast)
			id := fmt.Sprintf("pool-swap-%d", i)
			initial := tt.initial(eastTarget(id))
			old := ensureReady(t, p, initial)
			seen := make(chan string, 100)
			old.OnPVC(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
				seen <- obj.(*corev1.PersistentVolumeClaim).Name
			}})
			if err := p.Ensure(initial); err != nil {
				t.Fatal(err)
			}
			if c, _ := p.Get(id); c != old {
				t.Fatal("Ensure with identical settings replaced the connection")
			}

			start := time.Now()
			if err := p.Ensure(tt.changed(initial)); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > cacheRead {
				t.Errorf("Ensure took %s", d)
			}
			if c, _ := p.Get(id); c != old && !c.Health().Synced {
				t.Error("Get returned the replacement before its caches synced")
			}
			var current *clusters.Cluster
			took := poll.Until(t, 15*time.Second, "replacement live and READY", func() bool {
				current, _ = p.Get(id)
				return current != old && current.Health().State == clusters.HealthReady && current.Health().Synced
			})
			t.Logf("replacement took over after %s", took)
			select {
			case <-old.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the replaced connection's goroutines are still running")
			}

			pvc := createClaim(t, tt.namespace, claim(fmt.Sprintf("pool-swap-%d-after", i), managed, nil))
			poll.Until(t, 10*time.Second, "claim created after the swap cached", func() bool {
				_, ok := current.PVC(tt.namespace, pvc.Name)
				return ok
			})
			if _, ok := old.PVC(tt.namespace, pvc.Name); ok {
				t.Error("the retired connection's cache still follows the cluster")
			}
			poll.Until(t, 10*time.Second, "handler registered on the old connection sees the new claim", func() bool {
				for {
					select {
					case name := <-seen:
						if name == pvc.Name {
							return true
						}
					default:
						return false
					}
				}
			})
			if _, err := current.Client().PersistentVolumeClaims(tt.namespace).Get(t.Context(), pvc.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("write client of the replacement: %v", err)
			}
		})
	}
}

func TestCachesRecoverAfterAPIServerRestart(t *testing.T) {
	ns := east.Spec.Environment.Namespace
	var log healthLog
	opts := fast
	p := newPool(t, opts)
	log.follow(t, p)
	c := ensureReady(t, p, eastTarget("pool-restart"))
	before := createClaim(t, ns, claim("pool-before-restart", managed, nil))
	poll.Until(t, 10*time.Second, "claim cached", func() bool { _, ok := c.PVC(ns, before.Name); return ok })

	start := time.Now()
	if err := east.RestartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server restarted in %s", time.Since(start))
	after := createClaim(t, ns, claim("pool-after-restart", managed, nil))
	if err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), before.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := poll.Until(t, 60*time.Second, "cache follows changes made after the restart", func() bool {
		_, added := c.PVC(ns, after.Name)
		_, kept := c.PVC(ns, before.Name)
		return added && !kept
	})
	t.Logf("cache caught up %s after the changes; health states seen: %v", took, log.of("pool-restart"))
	poll.Until(t, 15*time.Second, "READY after the restart", func() bool { return c.Health().State == clusters.HealthReady })
}

func TestEnsureRefusesUnusableTargets(t *testing.T) {
	p := newPool(t, fast)
	valid := eastTarget("pool-unusable")
	tests := []struct {
		name   string
		change func(*clusters.Target)
	}{
		{"no environment id", func(t *clusters.Target) { t.EnvironmentID = "" }},
		{"no namespaces", func(t *clusters.Target) { t.Namespaces = nil }},
		{"repeated namespace", func(t *clusters.Target) { t.Namespaces = []string{"a", "b", "a"} }},
		{"certificate authority that is not PEM", func(t *clusters.Target) { t.Connection.CAData = []byte("not a certificate") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := valid
			tt.change(&target)
			if err := p.Ensure(target); err == nil {
				t.Error("Ensure accepted unusable settings")
			}
			if _, ok := p.Get(valid.EnvironmentID); ok {
				t.Error("a refused target is in the pool")
			}
		})
	}
	p.Close()
	if err := p.Ensure(valid); err == nil {
		t.Error("Ensure after Close succeeded; nothing would ever stop that connection")
	}
}

// The pool's connection to an environment and every probe of it draw on one
// rate limiter: once probes have spent the environment's burst, the pool's
// requests for it wait for tokens, while the same cluster under another
// environment id is served at once.
func TestPoolAndProbesShareTheEnvironmentsLimiter(t *testing.T) {
	namespaces := east.Spec.Environment.Namespaces()
	perProbe := len(namespaces) + 3 // a rules review per namespace, /version, StorageClasses, the cluster's identity
	// The pool lists its facts when it connects: CSIDrivers,
	// CSIStorageCapacities, ResourceQuotas, VolumeSnapshotClasses and
	// VolumeAttributesClasses.
	const factsLists = 5
	// A burst of several probes' requests: the other environment's health
	// checks (every 500 ms here) draw on its own burst while it connects,
	// which takes seconds on a busy machine.
	const probes = 4
	limiters := clusters.NewLimiters(0.2, probes*perProbe+factsLists) // one token every 5 s after the burst
	conn := eastTarget("spent").Connection
	prober := newProber(clusters.ProberOptions{Limiters: limiters})
	for range probes {
		if res := prober.Probe(t.Context(), "spent", conn, namespaces); res.State != clusters.HealthReady {
			t.Fatalf("probe: %+v", res)
		}
	}
	opts := fast
	opts.Limiters = limiters
	p := newPool(t, opts)
	list := func(c *clusters.Cluster) error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := c.Client().PersistentVolumeClaims(namespaces[0]).List(ctx, metav1.ListOptions{})
		return err
	}
	if err := list(ensureReady(t, p, eastTarget("fresh"))); err != nil {
		t.Fatalf("a request of an environment with tokens left: %v", err)
	}
	// The informers' watches are not throttled, so the connection syncs; its
	// requests wait for the probe's environment's tokens.
	if err := list(ensureReady(t, p, eastTarget("spent"))); err == nil || !strings.Contains(err.Error(), "rate limiter") {
		t.Fatalf("a request of the environment whose tokens a probe spent: %v, want a wait on the rate limiter", err)
	}
}

// CSIDrivers and CSIStorageCapacities are listed, not watched: a capacity
// published later is seen at the next listing — at once after a
// StorageClass changed (a new driver comes with new classes), and anyway
// after FactsInterval; a tier (like a driver or a snapshot class) after
// the third FactsInterval.
func TestFactsAreListedAgain(t *testing.T) {
	ctx := t.Context()
	admin := east.AdminClient().StorageV1()
	publish := func(name string) {
		qty := resource.MustParse("1Gi")
		if _, err := admin.CSIStorageCapacities("kube-system").Create(ctx, &storagev1.CSIStorageCapacity{
			ObjectMeta: metav1.ObjectMeta{Name: name}, StorageClassName: "standard", Capacity: &qty}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CSIStorageCapacities("kube-system").Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	listed := func(c *clusters.Cluster, name string) bool {
		return slices.ContainsFunc(c.CSIStorageCapacities(), func(x *storagev1.CSIStorageCapacity) bool { return x.Name == name })
	}
	t.Run("after a StorageClass change", func(t *testing.T) {
		c := ensureReady(t, newPool(t, fast), eastTarget("pool-facts-class")) // the default interval: 10 minutes
		publish("pool-facts-class")
		// A few good checks: not listed again without a reason.
		poll.Never(t, 3*fast.HealthInterval, "a capacity listed again with no StorageClass change, long before the interval",
			func() bool { return listed(c, "pool-facts-class") })
		class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pool-facts-new"}, Provisioner: "disk.csi.local.dev"}
		if _, err := admin.StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.StorageClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{}) })
		poll.Until(t, 10*time.Second, "the capacity listed after the class appeared", func() bool { return listed(c, "pool-facts-class") })
	})
	t.Run("after the interval", func(t *testing.T) {
		opts := fast
		opts.FactsInterval = 2 * time.Second
		c := ensureReady(t, newPool(t, opts), eastTarget("pool-facts-interval"))
		publish("pool-facts-interval")
		poll.Until(t, 10*time.Second, "the capacity listed after the interval", func() bool { return listed(c, "pool-facts-interval") })
	})
	t.Run("tiers after the third interval", func(t *testing.T) {
		opts := fast
		opts.FactsInterval = 2 * time.Second
		c := ensureReady(t, newPool(t, opts), eastTarget("pool-facts-tiers"))
		tier := &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: "pool-facts-tier"}, DriverName: "snap.csi.local.dev",
			Parameters: map[string]string{"tier": "gold"}}
		if _, err := admin.VolumeAttributesClasses().Create(ctx, tier, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// Gone before the next test lists the cluster's tiers.
			_ = admin.VolumeAttributesClasses().Delete(context.Background(), tier.Name, metav1.DeleteOptions{})
			poll.Until(t, 10*time.Second, "the tier deleted", func() bool {
				_, err := admin.VolumeAttributesClasses().Get(context.Background(), tier.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
		})
		publish("pool-facts-tiers")
		hasTier := func() bool {
			return slices.ContainsFunc(c.StorageObjects().Tiers, func(v *storagev1.VolumeAttributesClass) bool { return v.Name == tier.Name })
		}
		poll.Until(t, 10*time.Second, "the capacity listed after the interval", func() bool { return listed(c, "pool-facts-tiers") })
		if hasTier() {
			t.Fatal("the tier was listed with the capacities, at the first interval")
		}
		poll.Until(t, 15*time.Second, "the tier listed after the third interval", hasTier)
	})
}
