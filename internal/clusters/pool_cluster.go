package clusters

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	snapshotv1client "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/typed/volumesnapshot/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// syncPollInterval is how often a syncing cluster looks at its caches.
const syncPollInterval = 100 * time.Millisecond

// Cluster is one connection to an environment's cluster: a client for
// writes, informer caches for reads and health checks. Objects returned by
// its reads are shared with the caches and must not be modified.
//
// A Cluster retired by a change of credentials or namespaces, or by Remove,
// keeps answering reads from its last cache contents; callers should Get
// the environment's cluster for each operation rather than keep one.
type Cluster struct {
	pool   *Pool
	target Target
	// One client per kind of request, each with its own timeout.
	// The caches list and watch without a timeout (newCaches holds that
	// client); checks use a plain HTTP client over the same connection.
	checks *http.Client // health checks: HealthTimeout
	// writes is Client(), built at the first write (see Client).
	writes writeClient
	// conns are the watch and check connections, closed on stop.
	conns    *connections
	caches   *caches
	handlers *pvcHandlers

	// ctx is the cluster's lifetime, ended by cancel (stop).
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when every goroutine of the cluster has exited
	// watchBroke holds a notice that a watch connection failed: the run
	// goroutine checks the API server at once rather than at the next
	// steady check.
	watchBroke chan struct{}

	// tracker, settleReported and spread belong to the run goroutine;
	// spread is set once the first steady pause was drawn (nextCheck).
	tracker        tracker
	settleReported bool
	spread         bool

	// scheduled counts the checks the run goroutine scheduled; pending is
	// the number of the one not started yet (0: none). A worker starts a
	// check only by swapping pending from its number to 0, so a check taken
	// back (cancelCheck) never runs. checking counts the check scheduled
	// or running; checkResults carries its result to the run goroutine.
	scheduled    uint64
	pending      atomic.Uint64
	checking     sync.WaitGroup
	checkResults chan checkResult

	mu     sync.Mutex
	health Health
}

// newCluster builds a cluster without touching the network.
func (p *Pool) newCluster(t Target) (*Cluster, error) {
	c := &Cluster{pool: p, target: t, conns: newConnections(), done: make(chan struct{}), watchBroke: make(chan struct{}, 1), checkResults: make(chan checkResult)}
	// Informers list and watch without a timeout or a bound on answers;
	// health checks and writes read answers of known, small size. Watches
	// and checks share one connection (HTTP/2 carries both): a second one
	// per environment cost a TLS handshake at every start and, while
	// idle, its buffers, its reader and its pings (BenchmarkIdleFleet
	// reports memory and goroutines per environment).
	broke := func() {
		select {
		case c.watchBroke <- struct{}{}:
		default: // one notice is pending already
		}
	}
	watchOpts := p.clientOptions(t, "watch", 0, 0)
	config, shared, err := newBaseClient(t.Connection, watchOpts, true)
	if err != nil {
		return nil, err
	}
	if err := c.conns.track(shared, broke); err != nil {
		return nil, err
	}
	watch, err := newCacheClients(config, forUse(shared, watchOpts))
	if err != nil {
		return nil, err
	}
	c.checks = forUse(shared, p.clientOptions(t, "health", p.opts.HealthTimeout, maxResponseBytes))
	c.writes.opts = p.clientOptions(t, "write", requestTimeout, maxResponseBytes)
	onStorage := func() { p.storageChanged(t.EnvironmentID) }
	onSnapshot := func() { p.snapshotChanged(t.EnvironmentID) }
	c.caches = newCaches(watch, t.Namespaces, p.opts.Logger.With("environment", t.EnvironmentID), onStorage, onSnapshot, p.opts.FactsInterval)
	c.tracker = tracker{threshold: p.opts.FailureThreshold, syncSlots: p.opts.ConcurrentSyncs, syncTimeout: p.opts.SyncTimeout, caches: c.caches.count()}
	c.health = Health{State: HealthPending, Message: msgAwaitingServer}
	return c, nil
}

// clientOptions are the options of a client for use (its name in the
// request counts) whose requests time out after timeout (0: never) and whose
// answers are bounded to maxBytes (0: unbounded). Every client of an
// environment shares its limiter.
func (p *Pool) clientOptions(t Target, use string, timeout time.Duration, maxBytes int64) ClientOptions {
	opts := p.opts.Client
	opts.Use = use
	opts.OnDenied = func() { p.accessDenied(t.EnvironmentID) }
	opts.Timeout = timeout
	opts.MaxResponseBytes = maxBytes
	if p.opts.Limiters != nil {
		opts.RateLimiter = p.opts.Limiters.forEnvironment(t.EnvironmentID)
	}
	return opts
}

// writeClient is a cluster's client for writes: requests bounded by
// requestTimeout, over connections of its own, apart from conns so a write
// in flight outlives closeAll.
type writeClient struct {
	opts      ClientOptions
	mu        sync.Mutex
	core      corev1client.CoreV1Interface // nil until the first write
	snapshots snapshotv1client.SnapshotV1Interface
	http      *http.Client
}

// Client is for writes (PVC create, patch, delete); each request is bounded
// by requestTimeout as well as by its context. It is the core API group's
// client alone: the gateway writes claims, and snapshots through
// SnapshotClient over the same connections (see newHTTPClient). It is
// built at the first write, not with the cluster: most environments are
// written to rarely, and a fleet started or registered at once need not
// build a transport and parse a CA for each before any write.
func (c *Cluster) Client() corev1client.CoreV1Interface {
	w := &c.writes
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.core == nil {
		w.core, w.snapshots, w.http = newWriteClients(c.target, w.opts)
	}
	return w.core
}

// newWriteClients builds the clients Client and SnapshotClient return. The
// same connection settings built the cluster's shared client already, so
// this cannot fail in practice; if it does, every write fails with the
// reason.
func newWriteClients(t Target, opts ClientOptions) (corev1client.CoreV1Interface, snapshotv1client.SnapshotV1Interface, *http.Client) {
	cfg, hc, err := newHTTPClient(t.Connection, opts)
	if err == nil {
		var clients cacheClients
		if clients, err = newCacheClients(cfg, hc); err == nil {
			return clients.core, clients.snapshots, hc
		}
	}
	failing := &http.Client{Transport: failedTransport{err: fmt.Errorf("build cluster client: %w", err)}}
	clients, _ := newCacheClients(&rest.Config{Host: t.Connection.Server}, failing)
	return clients.core, clients.snapshots, failing
}

// failedTransport fails every request with err.
type failedTransport struct{ err error }

func (f failedTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// closeIdle closes the write connections not in use.
func (w *writeClient) closeIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.http != nil {
		utilnet.CloseIdleConnectionsFor(w.http.Transport)
	}
}

// Health is the cluster's state as the pool sees it.
func (c *Cluster) Health() Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health
}

// OnPVC registers a handler for add, update and delete of the environment's
// DCM-managed PVCs; a handler registered after the caches synced first
// receives the current PVCs as adds. The handler belongs to the environment,
// not to this connection: a replacement connection gets it too (and delivers
// every current PVC to it as an add), so a status tracker keeps receiving
// events across credential rotation. It must be safe for concurrent use:
// each namespace delivers on its own goroutine, and during a replacement both
// connections deliver. It is called on the informer's goroutine, so it must
// be quick: the namespace's cache waits for it.
func (c *Cluster) OnPVC(handler cache.ResourceEventHandler) {
	c.handlers.add(handler)
}

// start runs the cluster until stop. The pool calls it with its lock held,
// so a concurrent stop always finds the goroutine started.
func (c *Cluster) start() {
	if l := c.pool.opts.Limiters; l != nil {
		l.acquire(c.target.EnvironmentID)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.run(c.ctx)
}

// stop ends every goroutine of a started cluster, waits for them, and
// closes its connections.
func (c *Cluster) stop() {
	c.stopWatching()
	c.closeConnections()
}

// stopWatching ends the cluster's informers and health checks and waits for
// them; its connections stay open.
func (c *Cluster) stopWatching() {
	c.handlers.leave(c)
	c.cancel()
	<-c.done
}

// closeConnections closes a stopped cluster's connections. A write still in
// flight keeps its connection until it ends; the connection then closes when
// idle.
func (c *Cluster) closeConnections() {
	c.conns.closeAll()
	c.writes.closeIdle()
	if l := c.pool.opts.Limiters; l != nil {
		l.release(c.target.EnvironmentID)
	}
}

// run owns the cluster's lifecycle: health checks run from the start; once
// one succeeds the cluster waits for a sync slot, starts its informers and
// watches them sync until the deadline. Every state change is published from
// here, so they are reported in order.
func (c *Cluster) run(ctx context.Context) {
	defer close(c.done)
	defer c.caches.shutdown() // after ctx is cancelled: waits for the informers
	defer c.checking.Wait()   // a check under way ends with ctx
	defer c.cancelCheck()
	c.scheduleCheck(0, false)

	// Informers announce no sync: while syncing, the cluster's own goroutine
	// asks them (whenTicking), and the ticker is ignored otherwise.
	poll := time.NewTicker(syncPollInterval)
	defer poll.Stop()
	var deadline <-chan time.Time
	holding := false
	defer func() {
		if holding {
			<-c.pool.slots
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-c.checkResults:
			c.tracker.checked(r)
			c.scheduleCheck(c.nextCheck(ctx, r), r.ok)
		case <-c.watchBroke:
			// Checked now if the last check passed and none is under way
			// (while checks fail, the failure interval already runs).
			if c.tracker.failures == 0 && c.cancelCheck() {
				c.scheduleCheck(0, false)
			}
		case c.slotsWhen(c.tracker.phase == phaseQueued) <- struct{}{}:
			holding = true
			c.caches.start(ctx)
			c.tracker.started()
			deadline = time.After(c.pool.opts.SyncTimeout)
		case <-deadline:
			c.tracker.deadlinePassed()
		case <-whenTicking(poll, c.tracker.phase == phaseSyncing || c.tracker.phase == phaseLate):
			c.tracker.cachesUnsynced(c.caches.unsynced())
		}
		if holding && c.tracker.phase != phaseSyncing {
			<-c.pool.slots
			holding = false
		}
		c.publish()
	}
}

// slotsWhen is the pool's sync slots when the cluster may take one, and nil
// (a select case never chosen) otherwise.
func (c *Cluster) slotsWhen(ok bool) chan<- struct{} {
	if ok {
		return c.pool.slots
	}
	return nil
}

func whenTicking(t *time.Ticker, ok bool) <-chan time.Time {
	if ok {
		return t.C
	}
	return nil
}

// publish stores the tracker's view and tells the pool about a state change
// and, once, about the end of the initial sync.
func (c *Cluster) publish() {
	state, message := c.tracker.health()
	c.mu.Lock()
	changed := state != c.health.State
	c.health.State, c.health.Message, c.health.Synced = state, message, c.tracker.phase == phaseSynced
	h := c.health
	c.mu.Unlock()
	if changed {
		c.pool.changed(c, h)
	}
	if !c.settleReported && c.tracker.settled() {
		c.settleReported = c.pool.settled(c)
	}
}

// pvcHandlers are one environment's PVC event handlers and the clusters
// (live and pending) they are registered with.
type pvcHandlers struct {
	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
	members  []*Cluster
}

// add registers h for the environment's clusters, present and future. The
// present ones hand h their cached claims (calling it) after s.mu is
// released: the handler may take the pool's lock, which Pool.install holds
// while it waits for s.mu in join. A cluster that joins meanwhile gets h
// through join.
func (s *pvcHandlers) add(h cache.ResourceEventHandler) {
	s.mu.Lock()
	s.handlers = append(s.handlers, h)
	members := slices.Clone(s.members)
	s.mu.Unlock()
	for _, c := range members {
		c.caches.onPVC(h)
	}
}

// join registers every handler with c, before its informers start (its
// caches are empty: no handler is called).
func (s *pvcHandlers) join(c *Cluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.handlers = s
	for _, h := range s.handlers {
		c.caches.onPVC(h)
	}
	s.members = append(s.members, c)
}

// leave forgets c, which is being stopped.
func (s *pvcHandlers) leave(c *Cluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members = slices.DeleteFunc(s.members, func(m *Cluster) bool { return m == c })
}
