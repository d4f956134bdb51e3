package fleet

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/membership"
)

// Defaults for FeedOptions.
const (
	defaultRegistryInterval = 30 * time.Second
	defaultTouchInterval    = time.Minute
	defaultReplicaInterval  = 2 * time.Second
	// coalesce is how long the feed lets a burst of informer events (an
	// initial list, a driver publishing capacities) gather before it
	// rebuilds the environments they touched, once each.
	coalesce = 50 * time.Millisecond
)

// storeTimeout bounds one flush of changed snapshots, or one re-dating of
// live ones (a variable for tests).
var storeTimeout = 10 * time.Second

// EnvironmentSource is what the feed reads environments from and follows:
// the registry.
type EnvironmentSource interface {
	Each(ctx context.Context, fn func(environments.Environment) error) error
	Subscribe() *changes.Subscription[environments.Change]
}

// FeedOptions wire a Feed.
type FeedOptions struct {
	Index    *Index
	Clusters *clusters.Pool
	Registry EnvironmentSource
	Store    Store
	// Owned are the environments whose classes this replica watches and
	// persists; the others' it reads from their owners' snapshots.
	Owned  membership.Ownership
	Logger *slog.Logger
	// RegistryInterval is how often the registry is re-read without a
	// change notice, so replicas follow each other's changes (default 30s).
	RegistryInterval time.Duration
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
// fleet views show the same. It subscribes to the pool's, the registry's
// and the ownership's changes; notices only mark work and Run does it, so
// nothing waits on the index or the database but the feed itself.
//
// Snapshots are polled, not announced with LISTEN/NOTIFY: a listening
// session does not survive a transaction-pooling PgBouncer, and one cheap
// query (ids and revisions) per interval costs less than a missed notice.
type Feed struct {
	opts FeedOptions
	wake chan struct{}

	clusterChanges   *changes.Subscription[clusters.Change]
	registryChanges  *changes.Subscription[environments.Change]
	ownershipChanges *changes.Subscription[membership.Change]

	// loaded is set once Load succeeded; until then every step retries it
	// (the schema may not be migrated yet when the gateway starts).
	loaded bool

	mu            sync.Mutex
	dirty         map[string]bool // environments whose cluster changed
	registryDirty bool
	unsaved       map[string]bool // environments whose snapshot is not persisted yet
	// replicated is the revision of each other replica's snapshot the
	// index shows.
	replicated map[string]int64
}

// NewFeed returns a feed subscribed to the pool's and the registry's
// changes; call Load, then Run.
func NewFeed(opts FeedOptions) *Feed {
	if opts.RegistryInterval <= 0 {
		opts.RegistryInterval = defaultRegistryInterval
	}
	if opts.TouchInterval <= 0 {
		opts.TouchInterval = defaultTouchInterval
	}
	if opts.ReplicaInterval <= 0 {
		opts.ReplicaInterval = defaultReplicaInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Feed{opts: opts, wake: make(chan struct{}, 1), dirty: map[string]bool{}, unsaved: map[string]bool{},
		replicated:     map[string]int64{},
		clusterChanges: opts.Clusters.Subscribe(), registryChanges: opts.Registry.Subscribe(),
		ownershipChanges: opts.Owned.Subscribe()}
}

// clusterChanged marks an environment whose storage objects or health
// changed.
func (f *Feed) clusterChanged(id string) {
	f.mu.Lock()
	f.dirty[id] = true
	f.mu.Unlock()
	f.signal()
}

// registryChanged marks the registry for a re-read: an environment was
// registered, changed or deleted.
func (f *Feed) registryChanged() {
	f.mu.Lock()
	f.registryDirty = true
	f.mu.Unlock()
	f.signal()
}

func (f *Feed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Load fills the index from the registry and the persisted snapshots, so the
// first query after a start already shows every environment's last known
// classes, stale and dated when last seen current, until its owner's watch
// (this replica's, or another's snapshot) says more. Call it before Run; if
// it fails, Run retries it.
func (f *Feed) Load(ctx context.Context) error {
	if err := f.syncRegistry(ctx); err != nil {
		return err
	}
	snaps, err := f.load(ctx, nil)
	if err != nil {
		return err
	}
	for id, s := range snaps {
		f.opts.Index.Restore(id, s.objects, s.observed.Add(max(s.seen.Sub(s.observed), 0)))
	}
	f.loaded = true
	return nil
}

// load reads snapshots (see Store.load) and logs those that do not decode.
func (f *Feed) load(ctx context.Context, ids []string) (map[string]snapshot, error) {
	snaps, unreadable, err := f.opts.Store.load(ctx, ids)
	if len(unreadable) > 0 {
		// Replaced as soon as the owner watches the environment again.
		f.opts.Logger.WarnContext(ctx, "fleet index: ignoring persisted classes that do not decode", "environments", unreadable)
	}
	return snaps, err
}

// Run applies changes until ctx ends, then persists what is left.
func (f *Feed) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		f.clusterChanges.Run(ctx, func(_ context.Context, c clusters.Change) { f.clusterChanged(c.EnvironmentID) })
	})
	wg.Go(func() {
		f.registryChanges.Run(ctx, func(context.Context, environments.Change) { f.registryChanged() })
	})
	wg.Go(func() {
		f.ownershipChanges.Run(ctx, func(_ context.Context, c membership.Change) {
			f.mu.Lock()
			delete(f.replicated, c.EnvironmentID) // lost: read its new owner's snapshot next
			// Gained one registered through another replica: read the
			// registry for it now, not at the next re-read.
			f.registryDirty = true
			f.mu.Unlock()
			f.clusterChanged(c.EnvironmentID)
		})
	})
	defer wg.Wait()
	registryTick := time.NewTicker(f.opts.RegistryInterval)
	defer registryTick.Stop()
	touchTick := time.NewTicker(f.opts.TouchInterval)
	defer touchTick.Stop()
	replicaTick := time.NewTicker(f.opts.ReplicaInterval)
	defer replicaTick.Stop()
	for {
		select {
		case <-ctx.Done():
			f.persist(context.WithoutCancel(ctx)) // bounded by storeTimeout
			return
		case <-f.wake:
			select {
			case <-time.After(coalesce):
			case <-ctx.Done():
			}
		case <-registryTick.C:
			f.mu.Lock()
			f.registryDirty = true // the step below reads it
			f.mu.Unlock()
		case <-touchTick.C:
			f.touch(ctx)
		case <-replicaTick.C:
			f.replicate(ctx)
		}
		f.step(ctx)
	}
}

// step applies pending registry and cluster changes and persists the
// result.
func (f *Feed) step(ctx context.Context) {
	if !f.loaded {
		if err := f.Load(ctx); err != nil {
			if ctx.Err() == nil {
				f.opts.Logger.WarnContext(ctx, "fleet index: not loaded yet; retrying", "error", err)
			}
			return
		}
	}
	f.mu.Lock()
	syncRegistry := f.registryDirty
	f.registryDirty = false
	f.mu.Unlock()
	if syncRegistry {
		if err := f.syncRegistry(ctx); err != nil && ctx.Err() == nil {
			f.opts.Logger.ErrorContext(ctx, "fleet index: read the registry; retrying", "error", err)
			f.mu.Lock()
			f.registryDirty = true // retried on the next wake-up or tick, not at once
			f.mu.Unlock()
		}
	}
	f.mu.Lock()
	dirty := f.dirty
	f.dirty = map[string]bool{}
	f.mu.Unlock()
	for id := range dirty {
		f.refresh(id)
	}
	f.persist(ctx)
}

// syncRegistry makes the index hold the registered environments; new ones
// are refreshed from the pool, whose events may have come first.
func (f *Feed) syncRegistry(ctx context.Context) error {
	var metas []Meta
	err := f.opts.Registry.Each(ctx, func(e environments.Environment) error {
		metas = append(metas, Meta{ID: e.ID, Region: e.Spec.Region, Zone: e.Spec.Zone, State: string(e.Status.State), Overrides: e.Spec.CapabilityOverrides})
		return nil
	})
	if err != nil {
		return err
	}
	added := f.opts.Index.SetEnvironments(metas)
	f.mu.Lock()
	for _, id := range added {
		f.dirty[id] = true
	}
	f.mu.Unlock()
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
	c, ok := f.opts.Clusters.Get(id)
	var h clusters.Health
	if ok {
		h = c.Health()
	}
	if ok && c.StorageSynced() && h.State != clusters.StateUnreachable {
		changed = f.opts.Index.Observe(id, c.StorageObjects(), now)
		changed = f.opts.Index.SetWritable(id, h.State == clusters.StateReady && h.Synced) || changed
	} else {
		changed = f.opts.Index.MarkStale(id, now)
	}
	if changed {
		f.mu.Lock()
		f.unsaved[id] = true
		f.mu.Unlock()
	}
}

// replicate shows the environments other replicas own as their owners'
// snapshots do, reading only the rows whose revision moved since.
func (f *Feed) replicate(ctx context.Context) {
	if !f.loaded {
		return // step loads first
	}
	revisions, err := f.opts.Store.revisions(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.opts.Logger.WarnContext(ctx, "fleet index: read other replicas' snapshots; retrying", "error", err)
		}
		return
	}
	var moved []string
	f.mu.Lock()
	for id := range f.replicated {
		if _, ok := revisions[id]; !ok {
			delete(f.replicated, id) // deleted: registered again, its row starts over
		}
	}
	for id, revision := range revisions {
		if f.replicated[id] != revision && !f.opts.Owned.Owns(id) {
			moved = append(moved, id)
		}
	}
	f.mu.Unlock()
	if len(moved) == 0 {
		return
	}
	snaps, err := f.load(ctx, moved)
	if err != nil {
		if ctx.Err() == nil {
			f.opts.Logger.WarnContext(ctx, "fleet index: read other replicas' snapshots; retrying", "error", err)
		}
		return
	}
	for id, s := range snaps {
		if f.opts.Owned.Owns(id) {
			continue // claimed meanwhile: this replica's watch tells
		}
		shown := f.opts.Index.Replicate(id, s.objects, s.live, s.writable, s.observed)
		f.mu.Lock()
		if shown {
			f.replicated[id] = s.revision
		} else {
			// Registered through another replica since this one read the
			// registry: read it now, and this snapshot again after.
			f.registryDirty = true
		}
		f.mu.Unlock()
	}
}

// persist writes the owned snapshots that changed, within storeTimeout in
// all; it stops at the first failure, and what is left stays queued. A
// snapshot of an environment handed over meanwhile is dropped: its new
// owner writes its own.
func (f *Feed) persist(ctx context.Context) {
	f.mu.Lock()
	ids := make([]string, 0, len(f.unsaved))
	for id := range f.unsaved {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	writeCtx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	for _, id := range ids {
		claim, err := f.opts.Owned.Claim(id)
		snap, ok := f.opts.Index.snapshot(id)
		if err == nil && ok {
			if _, err := f.opts.Store.save(writeCtx, id, snap, claim); err != nil {
				if ctx.Err() == nil {
					f.opts.Logger.ErrorContext(ctx, "fleet index: persist environments' classes; retrying later", "pending", len(ids), "error", err)
				}
				return
			}
		}
		f.mu.Lock()
		delete(f.unsaved, id)
		f.mu.Unlock()
	}
}

// touch re-dates the snapshots of owned environments watched live now,
// except those whose newest classes are not persisted yet (their row is
// older).
func (f *Feed) touch(ctx context.Context) {
	var held []heldSnapshot
	f.mu.Lock()
	for _, id := range f.opts.Index.freshIDs() {
		if claim, err := f.opts.Owned.Claim(id); err == nil && !f.unsaved[id] {
			held = append(held, heldSnapshot{id: id, claim: claim})
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
