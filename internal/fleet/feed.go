package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/controller"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
)

// Defaults for FeedOptions.
const (
	defaultTouchInterval   = time.Minute
	defaultReplicaInterval = 2 * time.Second
	// coalesce is how long the feed lets a burst of informer events (an
	// initial list, a driver publishing capacities) gather before it
	// rebuilds the environment they touched, once.
	coalesce = 50 * time.Millisecond
)

// storeTimeout bounds one save of a snapshot, or one re-dating of live
// ones (a variable for tests).
var storeTimeout = 10 * time.Second

// EnvironmentSource is what the feed reads environments from and follows:
// the registry.
type EnvironmentSource interface {
	Each(ctx context.Context, fn func(environments.Environment) error) error
	IDs(ctx context.Context) ([]string, error)
	Get(ctx context.Context, id string) (environments.Environment, error)
	Subscribe() *changes.Subscription[environments.Change]
}

// Clusters are the live clusters of the environments this replica owns (a
// *clusters.Pool): the feed shows their storage objects and follows their
// changes.
type Clusters interface {
	Live(environmentID string) (clusters.Live, bool)
	Subscribe() *changes.Subscription[clusters.Change]
}

// FeedOptions wire a Feed.
type FeedOptions struct {
	Index    *Index
	Clusters Clusters
	Registry EnvironmentSource
	Store    Store
	// Owned are the environments whose classes this replica watches and
	// persists; the others' it reads from their owners' snapshots.
	Owned  membership.Ownership
	Logger *slog.Logger
	// TouchInterval is how often live environments' persisted snapshots are
	// re-dated (default 1m): after a restart with a dead cluster, its
	// observed_time is at most this old.
	TouchInterval time.Duration
	// ReplicaInterval is how often the snapshots other replicas' owned
	// environments moved to are read (default 2s): the delay with which
	// this replica's fleet views follow theirs.
	ReplicaInterval time.Duration
}

// Feed keeps an Index current: environments and their settings from the
// registry; for the environments this replica owns, classes from the
// cluster pool's caches and staleness from cluster health, persisted for
// the others (fenced by the claim); for the rest, their owners' persisted
// snapshots, read again whenever their revision moves — so every replica's
// fleet views show the same.
//
// An environment's settings and, where owned, its classes are a reconciler
// (internal/controller) keyed by environment: it is looked at when the
// registry (whichever replica changed it), its ownership or its cluster's
// storage objects or health change. Two periodic jobs stay outside it,
// each one statement for the whole fleet where the queue would make one
// per environment: re-dating live snapshots (TouchInterval) and reading
// the snapshots other replicas wrote since the last read (ReplicaInterval;
// postgres.ReadWritten says why it polls, and why an idle fleet costs it
// an index lookup).
type Feed struct {
	opts FeedOptions
	envs *controller.Controller

	// loaded is set once Load succeeded; until then every reconcile retries
	// it (the schema may not be migrated yet when the gateway starts).
	loaded atomic.Bool

	mu      sync.Mutex
	unsaved map[string]bool // owned environments whose snapshot is not persisted yet
	// replicated is the revision of each other replica's snapshot the
	// index shows.
	replicated map[string]int64
	// horizon is where the next replicate's read of the snapshots written
	// meanwhile starts (postgres.ReadWritten).
	horizon int64
	// restored are the snapshots Load read: the first replicate shows
	// those of environments other replicas own and drops them, reading
	// only what was written since, not every row again.
	restored map[string]snapshot
	// unreplicated are the environments whose snapshot the next replicate
	// reads whether written meanwhile or not: new to the index, or lost
	// to another replica.
	unreplicated map[string]bool
	// reread are the environments whose registry row the next reconcile
	// reads: named by the start-up listing, a registry change or a
	// snapshot of one not in the index. A change of a cluster's storage
	// objects or of ownership alone (informer events, hand-overs) is
	// applied without a database read.
	reread map[string]bool
}

// rereadAll marks ids for a registry read and returns them.
func (f *Feed) rereadAll(ids ...string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.reread[id] = true
	}
	return ids
}

// takeReread reports whether id's registry row is to be read, and clears
// the mark: a change after this is marked again and queues another look.
func (f *Feed) takeReread(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	marked := f.reread[id]
	delete(f.reread, id)
	return marked
}

// NewFeed returns a feed subscribed to the pool's, the registry's and the
// ownership's changes; call Load, then Run.
func NewFeed(opts FeedOptions) *Feed {
	if opts.TouchInterval <= 0 {
		opts.TouchInterval = defaultTouchInterval
	}
	if opts.ReplicaInterval <= 0 {
		opts.ReplicaInterval = defaultReplicaInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	f := &Feed{opts: opts, unsaved: map[string]bool{}, replicated: map[string]int64{}, unreplicated: map[string]bool{}, reread: map[string]bool{}}
	f.envs = controller.New(controller.Options{Name: "fleet feed", Logger: opts.Logger, Reconcile: f.reconcile,
		// Every environment is in the index, owned here or not.
		List: func(ctx context.Context) ([]string, error) {
			ids, err := opts.Registry.IDs(ctx)
			return f.rereadAll(ids...), err
		},
	})
	controller.Watch(f.envs, opts.Registry.Subscribe(), func(c environments.Change) []string { return f.rereadAll(c.EnvironmentID) })
	// Ownership changes nothing the row says: the row is read only if the
	// index does not hold the environment yet.
	controller.Watch(f.envs, opts.Owned.Subscribe(), func(c membership.Change) []string {
		f.replicateNext(c.EnvironmentID) // lost: read its new owner's snapshot next
		return []string{c.EnvironmentID}
	})
	clusterChanges := opts.Clusters.Subscribe()
	f.envs.Source(func(ctx context.Context) {
		clusterChanges.Run(ctx, func(_ context.Context, c clusters.Change) { f.envs.AddAfter(c.EnvironmentID, coalesce) })
	})
	return f
}

// Load fills the index from the registry and the persisted snapshots, so the
// first query after a start already shows every environment's last known
// classes, stale and dated when last seen current, until its owner's watch
// (this replica's, or another's snapshot) says more. Call it before Run; if
// it fails, the reconciles retry it.
func (f *Feed) Load(ctx context.Context) error {
	var metas []Meta
	err := f.opts.Registry.Each(ctx, func(e environments.Environment) error {
		metas = append(metas, metaOf(e))
		return nil
	})
	if err != nil {
		return err
	}
	f.opts.Index.SetEnvironments(metas)
	snaps, unreadable, horizon, err := f.opts.Store.written(ctx, 0, nil)
	f.warnUnreadable(ctx, unreadable)
	if err != nil {
		return err
	}
	for id, s := range snaps {
		f.opts.Index.Restore(id, s.objects, s.observed.Add(max(s.seen.Sub(s.observed), 0)))
	}
	f.mu.Lock()
	f.restored, f.horizon = snaps, horizon
	f.mu.Unlock()
	f.loaded.Store(true)
	return nil
}

func metaOf(e environments.Environment) Meta {
	return Meta{ID: e.ID, Region: e.Spec.Region, Zone: e.Spec.Zone, State: string(e.Status.State), Overrides: e.Spec.CapabilityOverrides}
}

// warnUnreadable logs the snapshots that do not decode.
func (f *Feed) warnUnreadable(ctx context.Context, ids []string) {
	if len(ids) > 0 {
		// Replaced as soon as the owner watches the environment again.
		f.opts.Logger.WarnContext(ctx, "fleet index: ignoring persisted classes that do not decode", "environments", ids)
	}
}

// Started reports whether the index holds what the registry and the
// persisted snapshots held at start, and the feed follows their changes.
func (f *Feed) Started() bool { return f.loaded.Load() && f.envs.Started() }

// Run reconciles environments and polls the other replicas' snapshots
// until ctx ends, then persists what is left.
func (f *Feed) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { f.envs.Run(ctx) })
	defer wg.Wait()
	// One statement each for the whole fleet (see Feed).
	touchTick := time.NewTicker(f.opts.TouchInterval)
	defer touchTick.Stop()
	replicaTick := time.NewTicker(f.opts.ReplicaInterval)
	defer replicaTick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()                                // no reconcile in flight
			f.persistAll(context.WithoutCancel(ctx)) // bounded by storeTimeout
			return
		case <-touchTick.C:
			f.touch(ctx)
		case <-replicaTick.C:
			f.replicate(ctx)
		}
	}
}

// reconcile makes the index show environment id as the registry and, where
// this replica owns it, its cluster say now, and persists an owned
// environment's snapshot that changed (a failed save is retried with the
// queue's backoff).
func (f *Feed) reconcile(ctx context.Context, id string) (time.Duration, error) {
	if !f.loaded.Load() {
		if err := f.Load(ctx); err != nil {
			return 0, fmt.Errorf("fleet index not loaded yet: %w", err)
		}
	}
	if f.takeReread(id) || !f.opts.Index.Has(id) {
		if err := f.readRow(ctx, id); err != nil {
			f.rereadAll(id) // a retry reads it again
			return 0, err
		}
		if !f.opts.Index.Has(id) {
			return 0, nil // deleted
		}
	}
	f.refresh(id)
	return 0, f.persist(ctx, id)
}

// readRow applies environment id's registry row to the index: its settings,
// or its removal once deleted.
func (f *Feed) readRow(ctx context.Context, id string) error {
	env, err := f.opts.Registry.Get(ctx, id)
	switch {
	case fault.Is(err, fault.NotFound):
		f.opts.Index.RemoveEnvironment(id)
		f.mu.Lock()
		delete(f.unsaved, id)
		delete(f.replicated, id)
		delete(f.unreplicated, id)
		f.mu.Unlock()
		return nil
	case err != nil:
		return err
	}
	if f.opts.Index.SetEnvironment(metaOf(env)) {
		f.replicateNext(id) // new here: read its owner's snapshot next
	}
	return nil
}

// refresh reads an owned environment's cluster caches into the index if
// they are current, and marks it stale otherwise; what changed is queued
// for persisting. Current means the storage caches have synced and the
// cluster answers: its other caches (claims, events) do not matter here.
// Environments owned elsewhere are left to replicate.
func (f *Feed) refresh(id string) {
	if !f.opts.Owned.Owns(id) {
		return
	}
	now := time.Now().Truncate(time.Microsecond) // as Postgres keeps it: every replica shows the same
	var changed bool
	c, ok := f.opts.Clusters.Live(id)
	var h clusters.Health
	if ok {
		h = c.Health()
	}
	if ok && c.StorageSynced() && h.State != clusters.HealthUnreachable {
		changed = f.opts.Index.Observe(id, c.StorageObjects(), now)
		changed = f.opts.Index.SetWritable(id, h.State == clusters.HealthReady && h.Synced) || changed
	} else {
		changed = f.opts.Index.MarkStale(id, now)
	}
	if changed {
		f.mu.Lock()
		f.unsaved[id] = true
		f.mu.Unlock()
	}
}

// replicateNext makes the next replicate read environment id's snapshot,
// whatever its revision.
func (f *Feed) replicateNext(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.replicated, id)
	f.unreplicated[id] = true
}

// replicate shows the environments other replicas own as their owners'
// snapshots do, reading only the snapshots written since its last read
// and those named by replicateNext.
func (f *Feed) replicate(ctx context.Context) {
	if !f.loaded.Load() {
		// Not loaded at start (the schema was not migrated yet, say): tried
		// again here, since no reconcile may come to load it.
		if err := f.Load(ctx); err != nil {
			if ctx.Err() == nil {
				f.opts.Logger.WarnContext(ctx, "fleet index: not loaded yet; retrying", "error", err)
			}
			return
		}
	}
	f.mu.Lock()
	named := slices.Collect(maps.Keys(f.unreplicated))
	clear(f.unreplicated)
	since := f.horizon
	f.mu.Unlock()
	// Not decoded: this replica's own snapshots (its watch tells), and
	// those read again unchanged (a write in flight at the last read).
	shown := func(id string, revision int64) bool {
		if f.opts.Owned.Owns(id) {
			return true
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		r, ok := f.replicated[id]
		return ok && r == revision
	}
	snaps, unreadable, horizon, err := f.opts.Store.written(ctx, since, shown)
	if err == nil && len(named) > 0 {
		var more map[string]snapshot
		var also []string
		more, also, err = f.opts.Store.load(ctx, named)
		maps.Copy(snaps, more) // read after: as new or newer
		unreadable = append(unreadable, also...)
	}
	f.warnUnreadable(ctx, unreadable)
	if err != nil {
		f.mu.Lock()
		for _, id := range named {
			f.unreplicated[id] = true
		}
		f.mu.Unlock()
		if ctx.Err() == nil {
			f.opts.Logger.WarnContext(ctx, "fleet index: read other replicas' snapshots; retrying", "error", err)
		}
		return
	}
	f.mu.Lock()
	f.horizon = horizon
	for id, s := range f.restored {
		if _, ok := snaps[id]; !ok { // what was read since is newer
			snaps[id] = s
		}
	}
	f.restored = nil
	f.mu.Unlock()
	for id, s := range snaps {
		if shown(id, s.revision) {
			continue // owned here: claimed since, or named
		}
		if !f.opts.Index.Replicate(id, s.objects, s.live, s.writable, s.observed) {
			// Registered through another replica since this one read the
			// registry: read it now, and this snapshot again after.
			f.envs.Add(f.rereadAll(id)[0])
			continue
		}
		f.mu.Lock()
		f.replicated[id] = s.revision
		f.mu.Unlock()
	}
}

// persist writes environment id's snapshot if it changed since it was last
// persisted. A snapshot of an environment handed over meanwhile is dropped:
// its new owner writes its own.
func (f *Feed) persist(ctx context.Context, id string) error {
	f.mu.Lock()
	unsaved := f.unsaved[id]
	f.mu.Unlock()
	if !unsaved {
		return nil
	}
	lease, err := f.opts.Owned.Lease(id)
	snap, ok := f.opts.Index.snapshot(id)
	if err == nil && ok {
		writeCtx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		if _, err := f.opts.Store.save(writeCtx, id, snap, lease); err != nil {
			return fmt.Errorf("persist the environment's classes: %w", err)
		}
	}
	f.mu.Lock()
	delete(f.unsaved, id)
	f.mu.Unlock()
	return nil
}

// persistAll writes what is left unsaved at shutdown, within storeTimeout
// in all; it stops at the first failure.
func (f *Feed) persistAll(ctx context.Context) {
	f.mu.Lock()
	ids := slices.Collect(maps.Keys(f.unsaved))
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	for _, id := range ids {
		if err := f.persist(ctx, id); err != nil {
			f.opts.Logger.ErrorContext(ctx, "fleet index: persist environments' classes at shutdown", "pending", len(ids), "error", err)
			return
		}
	}
}

// touch re-dates the snapshots of owned environments watched live now,
// except those whose newest classes are not persisted yet (their row is
// older).
func (f *Feed) touch(ctx context.Context) {
	var held []heldSnapshot
	f.mu.Lock()
	for _, id := range f.opts.Index.freshIDs() {
		if lease, err := f.opts.Owned.Lease(id); err == nil && !f.unsaved[id] {
			held = append(held, heldSnapshot{id: id, lease: lease})
		}
	}
	f.mu.Unlock()
	if len(held) == 0 {
		return
	}
	writeCtx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if err := f.opts.Store.touch(writeCtx, held, time.Now()); err != nil && ctx.Err() == nil {
		f.opts.Logger.ErrorContext(ctx, "fleet index: re-date live environments' snapshots", "error", err)
	}
}
