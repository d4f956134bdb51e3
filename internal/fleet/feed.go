package fleet

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/environments"
)

// Defaults for FeedOptions.
const (
	defaultRegistryInterval = 30 * time.Second
	defaultTouchInterval    = time.Minute
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
	Logger   *slog.Logger
	// RegistryInterval is how often the registry is re-read without a
	// change notice, so replicas follow each other's changes (default 30s).
	RegistryInterval time.Duration
	// TouchInterval is how often live environments' persisted snapshots are
	// re-dated (default 1m): after a restart with a dead cluster, its
	// observed_time is at most this old.
	TouchInterval time.Duration
}

// Feed keeps an Index current: environments and their settings from the
// registry, classes from the cluster pool's caches, staleness from cluster
// health; and it persists what it learns. It subscribes to the pool's and
// the registry's changes; notices only mark work and Run does it, so
// nothing waits on the index or the database but the feed itself.
type Feed struct {
	opts FeedOptions
	wake chan struct{}

	clusterChanges  *changes.Subscription[clusters.Change]
	registryChanges *changes.Subscription[environments.Change]

	// loaded is set once Load succeeded; until then every step retries it
	// (the schema may not be migrated yet when the gateway starts).
	loaded bool

	mu            sync.Mutex
	dirty         map[string]bool // environments whose cluster changed
	registryDirty bool
	unsaved       map[string]bool // environments whose snapshot is not persisted yet
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
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Feed{opts: opts, wake: make(chan struct{}, 1), dirty: map[string]bool{}, unsaved: map[string]bool{},
		clusterChanges: opts.Clusters.Subscribe(), registryChanges: opts.Registry.Subscribe()}
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
// classes (stale until its cluster is watched). Call it before Run; if it
// fails, Run retries it.
func (f *Feed) Load(ctx context.Context) error {
	if err := f.syncRegistry(ctx); err != nil {
		return err
	}
	snaps, unreadable, err := f.opts.Store.load(ctx)
	if err != nil {
		return err
	}
	if len(unreadable) > 0 {
		// Replaced as soon as the environment is watched again.
		f.opts.Logger.WarnContext(ctx, "fleet index: ignoring persisted classes that do not decode", "environments", unreadable)
	}
	for id, s := range snaps {
		f.opts.Index.Restore(id, s.objects, s.observed)
	}
	f.loaded = true
	return nil
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
	defer wg.Wait()
	registryTick := time.NewTicker(f.opts.RegistryInterval)
	defer registryTick.Stop()
	touchTick := time.NewTicker(f.opts.TouchInterval)
	defer touchTick.Stop()
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
		metas = append(metas, Meta{ID: e.ID, Region: e.Spec.Region, Zone: e.Spec.Zone, Overrides: e.Spec.CapabilityOverrides})
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

// refresh reads an environment's cluster caches into the index if they are
// current, and marks it stale otherwise. Current means the storage caches
// have synced and the cluster answers: its other caches (claims, events)
// do not matter here.
func (f *Feed) refresh(id string) {
	now := time.Now()
	if c, ok := f.opts.Clusters.Get(id); ok {
		if c.StorageSynced() && c.Health().State != clusters.StateUnreachable {
			if f.opts.Index.Observe(id, c.StorageObjects(), now) {
				f.mu.Lock()
				f.unsaved[id] = true
				f.mu.Unlock()
			}
			return
		}
	}
	f.opts.Index.MarkStale(id, now)
}

// persist writes the snapshots that changed, within storeTimeout in all;
// it stops at the first failure, and what is left stays queued.
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
		if objs, observed, ok := f.opts.Index.snapshot(id); ok {
			if err := f.opts.Store.save(writeCtx, id, objs, observed); err != nil {
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

// touch re-dates the snapshots of environments watched live now, except
// those whose newest classes are not persisted yet (their row is older).
func (f *Feed) touch(ctx context.Context) {
	f.mu.Lock()
	ids := slices.DeleteFunc(f.opts.Index.freshIDs(), func(id string) bool { return f.unsaved[id] })
	f.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	writeCtx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if err := f.opts.Store.touch(writeCtx, ids, time.Now()); err != nil && ctx.Err() == nil {
		f.opts.Logger.ErrorContext(ctx, "fleet index: re-date live environments' snapshots", "error", err)
	}
}
