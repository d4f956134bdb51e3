package status

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/dcm-project/storage-gateway/internal/clusters"
)

// provisioningFailed is the event reason of a failed provisioning attempt.
const provisioningFailed = "ProvisioningFailed"

// Follower feeds a Tracker from the cluster pool: it follows every
// environment's PVC events (a connection it joins late hands it its cached
// claims first, so no claim's current state is missed), and sweeps the
// caches periodically for what no PVC change announces — provisioning
// that keeps failing past the timeout turns FAILED, and new warning
// messages.
type Follower struct {
	tracker  *Tracker
	clusters *clusters.Pool
	// provisioningTimeout is how long provisioning may fail continuously
	// before the volume is FAILED.
	provisioningTimeout time.Duration
	log                 *slog.Logger

	mu sync.Mutex
	// claimed holds, by environment, the claims (namespace/name) its
	// handlers were handed and not told deleted: the sweep looks only at
	// these environments. Most of a large fleet's environments hold no
	// claim, and looking at each cost locks and cache lookups every
	// interval. A name left behind (a claim gone while its connection was
	// down) only costs a look at a cache that has all of them.
	claimed map[string]map[string]bool
}

// FollowerOptions configure a Follower.
type FollowerOptions struct {
	// Tracker is fed what the claims show; Pool's claims are followed.
	Tracker *Tracker
	Pool    *clusters.Pool
	// ProvisioningTimeout is how long provisioning may fail continuously
	// before the volume is FAILED.
	ProvisioningTimeout time.Duration
	Logger              *slog.Logger
}

// NewFollower returns a follower of the pool's claims; Run follows them.
func NewFollower(opts FollowerOptions) *Follower {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Follower{tracker: opts.Tracker, clusters: opts.Pool, provisioningTimeout: opts.ProvisioningTimeout, log: opts.Logger,
		claimed: map[string]map[string]bool{}}
}

// Run follows every environment's claim events and sweeps every interval
// until ctx ends; the pool keeps the handlers it registers, which ignore
// what they are handed once Run returned. The sweep is a ticker, not a
// reconciler: it reads only the pool's caches (no I/O) and re-evaluates
// every claim's provisioning deadline at once, where a keyed queue would
// hold a timer per claim.
func (f *Follower) Run(ctx context.Context, interval time.Duration) {
	f.clusters.FollowPVCs(func(envID string) cache.ResourceEventHandler { return f.handler(ctx, envID) })
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.sweep()
		}
	}
}

// sweep re-evaluates every cached claim of every synced environment that
// holds any; environments no longer in the pool are forgotten (a new
// connection hands its claims over again).
func (f *Follower) sweep() {
	f.mu.Lock()
	ids := slices.Collect(maps.Keys(f.claimed))
	f.mu.Unlock()
	for _, id := range ids {
		c, ok := f.clusters.Get(id)
		if !ok {
			f.mu.Lock()
			delete(f.claimed, id)
			f.mu.Unlock()
			continue
		}
		if c.Health().Synced {
			for _, pvc := range c.PVCs() {
				f.observe(id, c, pvc)
			}
		}
	}
}

// claim notes (or, once deleted, forgets) a claim of environment envID.
func (f *Follower) claim(envID string, pvc *corev1.PersistentVolumeClaim, deleted bool) {
	key := pvc.Namespace + "/" + pvc.Name
	f.mu.Lock()
	defer f.mu.Unlock()
	names := f.claimed[envID]
	switch {
	case !deleted && names == nil:
		f.claimed[envID] = map[string]bool{key: true}
	case !deleted:
		names[key] = true
	default:
		delete(names, key)
		if len(names) == 0 {
			delete(f.claimed, envID)
		}
	}
}

// handler observes envID's claims until ctx ends.
func (f *Follower) handler(ctx context.Context, envID string) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.observeObject(ctx, envID, obj) },
		UpdateFunc: func(_, obj any) { f.observeObject(ctx, envID, obj) },
		DeleteFunc: func(obj any) {
			if ctx.Err() != nil {
				return
			}
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				f.claim(envID, pvc, true)
				f.tracker.Observe(Observation{EnvironmentID: envID, VolumeID: pvc.Name, Status: Deleted, Message: "the claim was deleted"})
			}
		},
	}
}

func (f *Follower) observeObject(ctx context.Context, envID string, obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || ctx.Err() != nil {
		return
	}
	f.claim(envID, pvc, false)
	// The live cluster, not the one the handler was added on: handlers
	// outlive credential swaps.
	if c, ok := f.clusters.Get(envID); ok {
		f.observe(envID, c, pvc)
	}
}

// observe maps a claim with what c's cache knows about its class and
// warnings, and applies the provisioning timeout.
func (f *Follower) observe(envID string, c *clusters.Cluster, pvc *corev1.PersistentVolumeClaim) {
	st, msg, warnings := OfClaim(c, pvc)
	if failingFor(pvc, warnings) > f.provisioningTimeout {
		st, msg = Failed, "provisioning kept failing for more than "+f.provisioningTimeout.String()+": "+Clean(warnings[0].Message)
	}
	f.tracker.Observe(Observation{EnvironmentID: envID, VolumeID: pvc.Name, Status: st, Message: msg, VolumeName: pvc.Spec.VolumeName})
}

// failingFor is how long a pending claim's provisioning has been failing
// continuously, from the cluster's own record of the repeated warning — so
// every replica and every restart agrees. A single failure is transient and
// counts as zero.
func failingFor(pvc *corev1.PersistentVolumeClaim, warnings []*corev1.Event) time.Duration {
	if pvc.Status.Phase != corev1.ClaimPending || len(warnings) == 0 {
		return 0
	}
	w := warnings[0]
	if w.Reason != provisioningFailed || w.Count < 2 || w.FirstTimestamp.IsZero() {
		return 0
	}
	return time.Since(w.FirstTimestamp.Time)
}

// OfClaim maps a claim with what c's caches know of it — its class, or
// that the class is gone, and its warnings (returned too) — to its status.
// A claim whose class is gone says so: nothing will provision it, nor
// expand it.
func OfClaim(c clusters.Live, pvc *corev1.PersistentVolumeClaim) (Status, string, []*corev1.Event) {
	class, gone := c.ClassOf(pvc)
	warnings := OwnWarnings(c, pvc)
	st, msg := Of(pvc, class, warnings)
	if gone && pvc.DeletionTimestamp == nil {
		msg += "; " + ClassGone(*pvc.Spec.StorageClassName)
	}
	return st, msg, warnings
}

// ClassGone says that a claim's StorageClass no longer exists.
func ClassGone(class string) string {
	return "its StorageClass " + class + " does not exist in the cluster (any more): it cannot be provisioned or expanded"
}

// OwnWarnings returns the claim's own Warning events, newest first: events
// about an earlier claim of the same name do not count.
func OwnWarnings(c clusters.Live, pvc *corev1.PersistentVolumeClaim) []*corev1.Event {
	var own []*corev1.Event
	for _, e := range c.WarningEvents(pvc.Namespace, pvc.Name) {
		if e.InvolvedObject.UID == "" || e.InvolvedObject.UID == pvc.UID {
			own = append(own, e)
		}
	}
	return own
}
