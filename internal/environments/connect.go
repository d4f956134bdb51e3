package environments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/controller"
	"github.com/dcm-project/storage-gateway/internal/membership"
)

// healthWriteTimeout bounds recording one health change.
const healthWriteTimeout = 10 * time.Second

// deniedProbeGap is the least time between two probes of an environment set
// off by refused requests.
const deniedProbeGap = 10 * time.Second

// Connector is the one owner of which clusters the pool connects to: the
// pool holds the registered environments this replica owns. Connecting is
// a reconciler (internal/controller) keyed by environment: one is looked at
// at start and whenever it is registered, updated, deleted, gained or lost
// (the registry's Watch tells of changes made on other replicas); its pool
// entry is connected, replaced or removed to match the row and the
// ownership now. It never
// touches the network itself (Pool.Ensure does not), so at start a dead
// cluster cannot delay connecting a healthy one. It also records what the
// pool learns about reachability (see RecordHealth) and probes an
// environment whose requests the cluster refused (401/403).
type Connector struct {
	registry *Service
	pool     *clusters.Pool
	owned    membership.Ownership
	log      *slog.Logger

	connects    *controller.Controller
	poolChanges *changes.Subscription[clusters.Change]
	// denials has its own subscription: a probe takes seconds, and health
	// changes of other environments must not wait for it.
	denials *changes.Subscription[clusters.Change]

	// connected is the version of the row each pool entry was made from;
	// an unchanged row is not opened again. The controller reconciles one
	// environment at a time per key; mu guards the map across keys.
	mu        sync.Mutex
	connected map[string]rowVersion
}

// rowVersion identifies what a pool entry was made from: the row's
// generation moves with every update, and the credential generation is
// unique across every row ever sealed, so an environment deleted and
// registered again under the same id never looks unchanged.
type rowVersion struct{ row, credentials int64 }

func versionOf(rec record) rowVersion {
	return rowVersion{row: rec.generation, credentials: rec.sealed.Generation}
}

// ConnectorOptions configure a Connector: the pool holds the environments
// of Registry that Owned says this replica owns.
type ConnectorOptions struct {
	Registry *Service
	Pool     *clusters.Pool
	Owned    membership.Ownership
}

// NewConnector subscribes to the registry's, the ownership's and the
// pool's changes; Run acts on them.
func NewConnector(opts ConnectorOptions) *Connector {
	registry, pool, owned := opts.Registry, opts.Pool, opts.Owned
	c := &Connector{
		registry: registry, pool: pool, owned: owned, log: registry.log,
		poolChanges: pool.Subscribe(), denials: pool.Subscribe(),
		connected: map[string]rowVersion{},
	}
	c.connects = controller.New(controller.Options{Name: "connector", Logger: registry.log,
		// Every registered environment, and whatever the pool holds that
		// may no longer be.
		List: func(ctx context.Context) ([]string, error) {
			ids, err := registry.IDs(ctx)
			return append(ids, pool.IDs()...), err
		},
		Reconcile: c.follow,
	})
	controller.Watch(c.connects, registry.Subscribe(), func(ch Change) []string { return []string{ch.EnvironmentID} })
	controller.Watch(c.connects, owned.Subscribe(), func(ch membership.Change) []string { return []string{ch.EnvironmentID} })
	return c
}

// Started reports whether connecting has started: every owned
// environment was looked at or is queued (readiness).
func (c *Connector) Started() bool { return c.connects.Started() }

// Run connects every owned environment, then follows changes until ctx
// ends.
func (c *Connector) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { c.connects.Run(ctx) })
	wg.Go(func() {
		c.poolChanges.Run(ctx, func(ctx context.Context, ch clusters.Change) {
			if ch.Kind != clusters.HealthChanged {
				return
			}
			lease, err := c.owned.Lease(ch.EnvironmentID)
			if err != nil {
				return // handed over: the new owner's pool tells
			}
			if h, ok := c.pool.Health(ch.EnvironmentID); ok {
				c.registry.RecordHealth(ctx, ch.EnvironmentID, h, lease)
			}
		})
	})
	wg.Go(func() { c.denials.Run(ctx, c.probeRefused()) })
}

// probeRefused returns the handler of AccessDenied notices: it probes the
// environment, at most once per deniedProbeGap, so a cluster refusing every
// request (an informer retrying, say) is not probed as often as it refuses.
func (c *Connector) probeRefused() func(context.Context, clusters.Change) {
	probed := map[string]time.Time{} // owned by the denials goroutine
	return func(ctx context.Context, ch clusters.Change) {
		if ch.Kind != clusters.AccessDenied {
			return
		}
		if last, ok := probed[ch.EnvironmentID]; ok && time.Since(last) < deniedProbeGap {
			return
		}
		for id, last := range probed {
			if time.Since(last) >= deniedProbeGap {
				delete(probed, id)
			}
		}
		lease, err := c.owned.Lease(ch.EnvironmentID)
		if err != nil {
			return // handed over: the new owner's own requests tell
		}
		probed[ch.EnvironmentID] = time.Now()
		if err := c.registry.Probe(ctx, ch.EnvironmentID, lease); err != nil && ctx.Err() == nil {
			c.log.ErrorContext(ctx, "probe environment after a refused request", "environment", ch.EnvironmentID, "error", err)
		}
	}
}

// follow makes the pool hold environment id as the row stored now and the
// ownership now say: whatever notice named it (a deletion and a
// re-registration of the same id may arrive merged or in either order, and
// the watch tells of it as a change of the row's credential generation).
// The row of an environment this replica does not own is not read: every
// replica hears of every registration, and all but its owner would read
// the row, sealed credentials and all, only to find it is not theirs.
func (c *Connector) follow(ctx context.Context, id string) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.owned.Owns(id) {
		c.disconnect(id)
		return 0, nil
	}
	rec, err := c.registry.repo.get(ctx, id)
	switch {
	case errors.Is(err, errNotFound):
		c.disconnect(id)
		return 0, nil
	case err != nil:
		return 0, err // retried with backoff
	}
	return 0, c.connect(ctx, rec)
}

// connect hands rec's connection to the pool, which starts it or swaps the
// live one when settings changed (identical ones: no-op). Credentials that
// cannot be opened leave the pool as it is (the probe records why) and are
// tried again with the queue's backoff: a key ring reloaded meanwhile may
// open them.
func (c *Connector) connect(ctx context.Context, rec record) error {
	if v, ok := c.connected[rec.ID]; ok && v == versionOf(rec) {
		return nil
	}
	if rec.Connection.Insecure && !c.registry.allowInsecure {
		c.disconnect(rec.ID)
		return nil
	}
	conn, err := c.registry.open(ctx, rec)
	if errors.Is(err, errChangedMeanwhile) {
		return nil // rotated since rec was read: its own change follows
	}
	if err != nil {
		return fmt.Errorf("stored credentials unusable; not connected: %w", err)
	}
	if err := c.pool.Ensure(clusters.Target{EnvironmentID: rec.ID, Connection: conn, Namespaces: rec.Spec.Namespaces()}); err != nil {
		return fmt.Errorf("connect environment: %w", err)
	}
	c.connected[rec.ID] = versionOf(rec)
	return nil
}

func (c *Connector) disconnect(id string) {
	c.pool.Remove(id)
	delete(c.connected, id)
}

// RecordHealth stores what the pool learns about reachability between
// probes, while the owner's claim holds. It only moves an environment to
// UNREACHABLE, or back from it (or from PENDING) to READY: a reachable
// cluster may still lack permissions, which only the probe can tell.
func (s *Service) RecordHealth(ctx context.Context, id string, h clusters.Health, lease membership.Lease) {
	if h.State != clusters.HealthReady && h.State != clusters.HealthUnreachable {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, healthWriteTimeout)
	defer cancel()
	changed, err := s.repo.recordReachability(ctx, id, stateOf(h.State), h.Message, now(), lease)
	if err != nil {
		if ctx.Err() == nil {
			s.log.ErrorContext(ctx, "record environment health", "environment", id, "error", err)
		}
		return
	}
	if changed {
		s.log.InfoContext(ctx, "environment state changed", "environment", id, "to", h.State, "message", h.Message)
	}
}
