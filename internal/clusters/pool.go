package clusters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// Defaults for PoolOptions. A healthy cluster is checked every steady
// interval (5 × 10s; the first pause anywhere in it), one whose last check
// failed every interval (10s), so a cluster that goes away silently is
// UNREACHABLE at most one steady interval, one interval and two timeouts
// after its last good answer (50s + 10s + 2×5s = 70s, as deploy/README.md
// promises); one whose watch connection breaks (the API server stopped or
// restarted, the path reset) is checked at once, and UNREACHABLE one
// interval and two timeouts later (20s). One that comes back is READY again
// at most one timeout and one interval after it does (5s + 10s = 15s: the
// check in flight may still time out, the next one succeeds). An idle
// healthy cluster costs 1.2 checks a minute: with the facts' listings and
// the permission probe every ten minutes, under two requests a minute
// (BenchmarkIdleFleet).
const (
	defaultSyncTimeout      = 30 * time.Second
	defaultHealthInterval   = 10 * time.Second
	defaultHealthTimeout    = 5 * time.Second
	defaultFailureThreshold = 2
)

// defaultConcurrentSyncs bounds the initial syncs in flight across
// environments, so starting a large fleet does not flood the gateway's
// memory with decoded objects all at once. A sync mostly waits on its
// cluster's answers, so the bound is set by memory, not cores: at 4, a
// restart with 1,000 small environments took 30 s (BenchmarkIdleFleet).
// Only clusters that have answered a health check take a slot, so dead ones
// never hold up the queue.
const defaultConcurrentSyncs = 32

// defaultConcurrentDials bounds the health checks in flight across
// environments that open a connection (a TLS handshake, then /readyz): the
// first of each environment, and the first after a check without an answer
// dropped its connection. A restart of three replicas over 10,000
// environments sent all 10,000 at once: the API servers could not answer
// them within the check's timeout, the failed checks dropped their
// connections and dialled again, and about 4,000 health changes to
// UNREACHABLE followed within 40 s (BenchmarkIdleFleet; with the bound,
// none in the two runs whose logs were read).
// Checks on an open connection are not bounded: they cost a request, and
// a queue of them would only delay what they detect.
const defaultConcurrentDials = 32

// requestTimeout bounds each write sent through Cluster.Client, so a hung
// cluster cannot hold a request forever even when the caller's context has no
// deadline. Watches use a client without it.
const requestTimeout = 30 * time.Second

var errPoolClosed = errors.New("cluster pool: closed")

// PoolOptions configure every cluster connection and its health checks.
type PoolOptions struct {
	// Client holds the egress policy, QPS and Burst; the pool sets Timeout
	// per request kind (none for watches, HealthTimeout for health checks,
	// requestTimeout for writes).
	Client ClientOptions
	// Limiters, when set, replace per-client QPS and Burst with one limiter
	// per environment that its probes share too.
	Limiters *Limiters
	// SyncTimeout is the deadline for the initial cache sync (default 30s);
	// after it the cluster is reported UNREACHABLE, or DEGRADED when only
	// some caches synced, and keeps retrying.
	SyncTimeout time.Duration
	// HealthInterval is the pause after a failed check (default 10s);
	// SteadyHealthInterval the pause after a good one (default 5 ×
	// HealthInterval).
	HealthInterval, SteadyHealthInterval time.Duration
	// HealthTimeout bounds one check (default 5s).
	HealthTimeout time.Duration
	// FactsInterval is how often a connected cluster's CSIDrivers and
	// CSIStorageCapacities are listed again when no StorageClass changed
	// (default 10m); they are listed, not watched.
	FactsInterval time.Duration
	// ConcurrentSyncs bounds the initial cache syncs in flight across
	// environments (default 32); the rest wait for a slot.
	ConcurrentSyncs int
	// ConcurrentDials bounds the health checks in flight across
	// environments that open a new connection (default 32); the rest wait
	// for a slot before their timeout starts.
	ConcurrentDials int
	// FailureThreshold is how many consecutive failed checks make a cluster
	// UNREACHABLE (default 2); one success makes it READY again.
	FailureThreshold int
	Logger           *slog.Logger
}

func (o PoolOptions) withDefaults() PoolOptions {
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = defaultSyncTimeout
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = defaultHealthInterval
	}
	if o.FactsInterval <= 0 {
		o.FactsInterval = defaultFactsInterval
	}
	if o.ConcurrentSyncs <= 0 {
		o.ConcurrentSyncs = defaultConcurrentSyncs
	}
	if o.ConcurrentDials <= 0 {
		o.ConcurrentDials = defaultConcurrentDials
	}
	if o.SteadyHealthInterval <= 0 {
		o.SteadyHealthInterval = 5 * o.HealthInterval
	}
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = defaultHealthTimeout
	}
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = defaultFailureThreshold
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Target is what the pool connects to for one environment.
type Target struct {
	EnvironmentID string
	Connection    kubeconfig.Connection
	// Namespaces are the default namespace first, then the allowed ones.
	Namespaces []string
}

func (t Target) validate() error {
	switch {
	case t.EnvironmentID == "":
		return errors.New("cluster pool: an environment id is required")
	case len(t.Namespaces) == 0:
		return fmt.Errorf("cluster pool: environment %s has no namespaces", t.EnvironmentID)
	}
	for i, ns := range t.Namespaces {
		if ns == "" || slices.Contains(t.Namespaces[:i], ns) {
			return fmt.Errorf("cluster pool: environment %s: namespace %q is empty or repeated", t.EnvironmentID, ns)
		}
	}
	return nil
}

func (t Target) same(o Target) bool {
	return t.EnvironmentID == o.EnvironmentID && t.Connection.Equal(o.Connection) && slices.Equal(t.Namespaces, o.Namespaces)
}

// Pool is the gateway's live connection to every environment: clients,
// informer caches and health checks per environment. Nothing in it waits on
// the network while holding a lock, so a slow or dead cluster never delays
// Ensure, Get or any cached read, and a dead one never delays another
// cluster. Slow ones can: at most ConcurrentSyncs initial syncs run at
// once, each for at most SyncTimeout, and the rest queue.
type Pool struct {
	opts PoolOptions
	// slots holds one token per initial sync in flight; dials one per
	// health check in flight that opens a connection.
	slots, dials chan struct{}
	// changes tells subscribers about health and storage changes.
	changes changes.Topic[Change]
	// checks runs every cluster's health checks.
	checks *healthChecks

	mu     sync.Mutex
	envs   map[string]*environment
	closed bool
	// stopped are the clusters StopWatching stopped, whose connections
	// Close closes.
	stopped []*Cluster
	// pvcFollowers give every environment, current and future, a PVC
	// event handler (see FollowPVCs).
	pvcFollowers []func(environmentID string) cache.ResourceEventHandler
}

// environment is one environment's place in the pool. During a change of
// credentials or namespaces it has two clusters: live keeps serving until
// next has synced (or given up trying), so reads and the status tracker see
// no gap.
type environment struct {
	live, next *Cluster
	// reported is the last state published (or the first state).
	reported HealthState
	// handlers outlive any one connection (see Cluster.OnPVC).
	handlers *pvcHandlers
}

// wants reports whether t is already what the environment runs or is
// switching to.
func (e *environment) wants(t Target) bool {
	if e.next != nil {
		return e.next.target.same(t)
	}
	return e.live.target.same(t)
}

// NewPool returns an empty pool; Ensure adds environments.
func NewPool(opts PoolOptions) *Pool {
	opts = opts.withDefaults()
	return &Pool{
		opts:   opts,
		slots:  make(chan struct{}, opts.ConcurrentSyncs),
		dials:  make(chan struct{}, opts.ConcurrentDials),
		checks: newHealthChecks(opts.HealthInterval),
		envs:   map[string]*environment{},
	}
}

// ChangeKind says what a Change is about.
type ChangeKind int

const (
	// HealthChanged: the environment's live cluster changed state, or a
	// replacement took over with another state.
	HealthChanged ChangeKind = iota + 1
	// StorageChanged: a StorageClass, CSIDriver or CSIStorageCapacity of
	// the environment changed, or a replacement connection took over; the
	// live cluster has the current objects.
	StorageChanged
	// AccessDenied: the cluster answered one of the environment's requests
	// (a watch, a list, a write, a health check) with 401 or 403 — its
	// credentials may have lost permissions, which only a probe can tell.
	AccessDenied
	// SnapshotChanged: a VolumeSnapshot the gateway made in the
	// environment changed (see Cluster.FollowSnapshots).
	SnapshotChanged
)

// Change is a notice the pool publishes: what changed, not to what. Equal
// notices waiting in a subscriber's queue merge, so a subscriber reads the
// current state when it handles one (Health, Get) and always acts on the
// latest, never on a stale state delivered late.
type Change struct {
	Kind          ChangeKind
	EnvironmentID string
}

// Subscribe returns a subscription to the pool's changes; its owner runs it
// (changes.Subscription.Run). Delivery never runs on a cluster's goroutine.
func (p *Pool) Subscribe() *changes.Subscription[Change] { return p.changes.Subscribe() }

// Ensure starts a connection for t, or replaces the existing one when its
// connection settings or namespaces changed; identical targets are a no-op.
// A new environment's connection is live at once. A replacement is started
// beside the live one and takes over when its caches have synced (or its
// initial sync ended without success); until then the live connection keeps
// serving, and then it is stopped. Ensure never waits on the network; it
// fails only for unusable settings or after Close.
func (p *Pool) Ensure(t Target) error {
	if err := t.validate(); err != nil {
		return err
	}
	t.Namespaces = slices.Clone(t.Namespaces)
	if p.wants(t) {
		return nil
	}
	c, err := p.newCluster(t)
	if err != nil {
		return err
	}
	dropped, err := p.install(c)
	if dropped != nil {
		dropped.stop()
	}
	return err
}

// wants reports whether t is already running or pending for its environment.
func (p *Pool) wants(t Target) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	env := p.envs[t.EnvironmentID]
	return env != nil && env.wants(t)
}

// install makes c the environment's live cluster (a new environment) or its
// pending replacement, and starts it; c stays unused (it has not touched the
// network) when another caller got there first or the environment is back to
// its live settings. It returns the pending replacement that is no longer
// wanted, which the caller must stop.
func (p *Pool) install(c *Cluster) (dropped *Cluster, _ error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPoolClosed
	}
	env := p.envs[c.target.EnvironmentID]
	switch {
	case env == nil:
		env = &environment{live: c, reported: HealthPending, handlers: &pvcHandlers{}}
		for _, follow := range p.pvcFollowers {
			env.handlers.handlers = append(env.handlers.handlers, follow(c.target.EnvironmentID))
		}
	case env.wants(c.target):
		return nil, nil
	case env.live.target.same(c.target):
		dropped, env.next = env.next, nil
		return dropped, nil
	}
	env.handlers.join(c)
	if env.live == c {
		p.envs[c.target.EnvironmentID] = env
	} else {
		dropped, env.next = env.next, c
	}
	c.start()
	return dropped, nil
}

// FollowPVCs subscribes to the DCM-managed PVCs of every environment the
// pool holds now or connects later: handler(environmentID) is called once
// per environment and its result receives that environment's PVC adds,
// updates and deletes from before its informers start (see Cluster.OnPVC
// for what the handler must tolerate). Subscribing before the pool connects
// anything means no claim's first state is ever missed.
func (p *Pool) FollowPVCs(handler func(environmentID string) cache.ResourceEventHandler) {
	p.mu.Lock()
	p.pvcFollowers = append(p.pvcFollowers, handler)
	current := maps.Clone(p.envs)
	p.mu.Unlock()
	for id, env := range current {
		env.handlers.add(handler(id))
	}
}

// Remove stops an environment's informers, health checks and connections and
// waits until every goroutine it started has exited.
func (p *Pool) Remove(environmentID string) {
	p.mu.Lock()
	env := p.envs[environmentID]
	delete(p.envs, environmentID)
	p.mu.Unlock()
	if env != nil {
		stopAll([]*Cluster{env.live, env.next})
	}
}

// StopWatching ends every environment's informers and health checks and waits
// for them; no change is published afterwards and Ensure fails. The
// connections stay open until Close: the gateway stops its inputs first and
// closes connections last.
func (p *Pool) StopWatching() {
	p.mu.Lock()
	p.closed = true
	var all []*Cluster
	for _, env := range p.envs {
		all = append(all, env.live, env.next)
	}
	clear(p.envs)
	p.stopped = append(p.stopped, all...)
	p.mu.Unlock()
	each(all, (*Cluster).stopWatching)
	p.checks.stop()
}

// Close stops watching (if StopWatching has not) and closes every
// connection.
func (p *Pool) Close() {
	p.StopWatching()
	p.mu.Lock()
	all := p.stopped
	p.stopped = nil
	p.mu.Unlock()
	each(all, (*Cluster).closeConnections)
}

// stopAll stops clusters.
func stopAll(clusters []*Cluster) { each(clusters, (*Cluster).stop) }

// each runs fn on clusters concurrently (nil entries are skipped), so
// stopping a large pool takes as long as its slowest cluster, not their sum.
func each(clusters []*Cluster, fn func(*Cluster)) {
	var wg sync.WaitGroup
	for _, c := range clusters {
		if c != nil {
			wg.Go(func() { fn(c) })
		}
	}
	wg.Wait()
}

// IDs returns the environments the pool holds, in no particular order.
func (p *Pool) IDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.envs))
}

// TotalStorage is the storage capacity an environment's cluster publishes,
// as a quantity string, when it publishes any (DCM registration metadata).
func (p *Pool) TotalStorage(environmentID string) (string, bool) {
	c, ok := p.Get(environmentID)
	if !ok {
		return "", false
	}
	total, ok := c.TotalCapacity()
	return total.String(), ok
}

// Health is the health of the environment's live cluster.
func (p *Pool) Health(environmentID string) (Health, bool) {
	c, ok := p.Get(environmentID)
	if !ok {
		return Health{}, false
	}
	return c.Health(), true
}

// ReadyAndSynced reports whether the environment's live cluster answers
// and its caches have synced.
func (p *Pool) ReadyAndSynced(environmentID string) bool {
	h, ok := p.Health(environmentID)
	return ok && h.State == HealthReady && h.Synced
}

// Get returns the environment's live cluster.
func (p *Pool) Get(environmentID string) (*Cluster, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	env := p.envs[environmentID]
	if env == nil {
		return nil, false
	}
	return env.live, true
}

// changed is called by c's own goroutine when its state changed; it is
// reported if c serves its environment.
func (p *Pool) changed(c *Cluster, h Health) {
	p.mu.Lock()
	env := p.envs[c.target.EnvironmentID]
	live := env != nil && env.live == c
	if live {
		env.reported = h.State
	}
	p.mu.Unlock()
	if live {
		p.report(c.target.EnvironmentID, h)
	}
}

// settled is called by c's own goroutine once its initial sync is over
// (synced, deadline passed, or the cluster is down), and again after each
// health check until it returns true. If c is a pending replacement it takes
// over and the cluster it replaces is stopped before c's state is reported,
// so reports stay in order — but an unsynced replacement never displaces a
// synced live cluster: reads would go from cached to unavailable.
func (p *Pool) settled(c *Cluster) (final bool) {
	p.mu.Lock()
	env := p.envs[c.target.EnvironmentID]
	if env == nil || env.next != c {
		p.mu.Unlock()
		return true
	}
	if !c.Health().Synced && env.live.Health().Synced {
		p.mu.Unlock()
		return false
	}
	retired := env.live
	env.live, env.next = c, nil
	h := c.Health()
	report := h.State != env.reported
	env.reported = h.State
	p.mu.Unlock()

	retired.stop()
	if report {
		p.report(c.target.EnvironmentID, h)
	}
	p.storageChanged(c.target.EnvironmentID)
	return true
}

func (p *Pool) report(environmentID string, h Health) {
	level := slog.LevelInfo
	if h.State != HealthReady && h.State != HealthPending {
		level = slog.LevelWarn
	}
	p.opts.Logger.Log(context.Background(), level, "cluster health changed",
		"environment", environmentID, "state", h.State, "message", h.Message)
	p.changes.Publish(Change{Kind: HealthChanged, EnvironmentID: environmentID})
}

// accessDenied is called from any goroutine of the environment's clients;
// equal notices waiting in a subscriber's queue merge.
func (p *Pool) accessDenied(environmentID string) {
	p.changes.Publish(Change{Kind: AccessDenied, EnvironmentID: environmentID})
}

// snapshotChanged is called from the snapshot informers' goroutines.
func (p *Pool) snapshotChanged(environmentID string) {
	p.changes.Publish(Change{Kind: SnapshotChanged, EnvironmentID: environmentID})
}

// storageChanged is called from informer goroutines, often in bursts:
// equal notices waiting in a subscriber's queue merge.
func (p *Pool) storageChanged(environmentID string) {
	p.changes.Publish(Change{Kind: StorageChanged, EnvironmentID: environmentID})
}
