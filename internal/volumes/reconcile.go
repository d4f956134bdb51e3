package volumes

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// Reconciler timing: a claim written less than cacheLag ago may not be in
// the cache yet; a recorded create younger than createSettle (longer than a
// request's timeout) may still be under way; idempotency keys are kept at
// least keyRetention.
const (
	cacheLag     = 10 * time.Second
	createSettle = time.Minute
	keyRetention = 24 * time.Hour
)

// Reconciler repairs what an interrupted flow left behind, once per
// interval and for each environment whose cluster became ready with synced
// caches (it subscribes to the pool): a record whose claim was never created
// gets it; a record whose claim exists but whose uid was never stored gets
// the uid; a claim created after its volume was deleted is deleted; a volume
// whose claim vanished — also while the gateway was down or disconnected —
// is reported DELETED. It also forgets idempotency keys past their
// retention. Claims without a record are never touched, only counted (the
// environment's unadopted_volume_count: another provider's, until an admin
// adopts them).
type Reconciler struct {
	service        *Service
	interval       time.Duration
	clusterChanges *changes.Subscription[clusters.Change]
	// passes serializes a resynced environment's pass and the periodic one,
	// so two never settle the same record at once.
	passes sync.Mutex
}

// NewReconciler returns a reconciler subscribed to the pool's changes; Run
// starts it.
func (s *Service) NewReconciler(interval time.Duration) *Reconciler {
	return &Reconciler{service: s, interval: interval, clusterChanges: s.clusters.Subscribe()}
}

// Run reconciles until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		r.clusterChanges.Run(ctx, func(ctx context.Context, c clusters.Change) {
			if c.Kind == clusters.HealthChanged && r.service.clusters.ReadyAndSynced(c.EnvironmentID) {
				r.passes.Lock()
				defer r.passes.Unlock()
				r.service.ReconcileEnvironment(ctx, c.EnvironmentID)
			}
		})
	})
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.passes.Lock()
			r.service.ReconcileAll(ctx)
			r.passes.Unlock()
		}
	}
}

// ReconcileAll runs one reconciliation pass over every environment this
// replica owns and is connected to (reconcile skips the others).
func (s *Service) ReconcileAll(ctx context.Context) {
	if n, err := s.repo.purgeKeys(ctx, keyRetention); err != nil {
		s.log.ErrorContext(ctx, "purge idempotency keys", "error", err)
	} else if n > 0 {
		s.log.InfoContext(ctx, "idempotency keys purged", "count", n)
	}
	envs := s.clusters.IDs()
	slices.Sort(envs)
	for _, envID := range envs {
		s.ReconcileEnvironment(ctx, envID)
	}
	s.counted.Lock()
	maps.DeleteFunc(s.counted.zero, func(env string, _ int64) bool {
		_, held := slices.BinarySearch(envs, env)
		return !held
	})
	s.counted.Unlock()
}

// ReconcileEnvironment runs one pass over one environment.
func (s *Service) ReconcileEnvironment(ctx context.Context, envID string) {
	if err := s.reconcile(ctx, envID); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "reconcile volumes", "environment", envID, "error", err)
	}
}

func (s *Service) reconcile(ctx context.Context, envID string) error {
	cluster, err := s.writable(envID)
	if err != nil {
		return nil // not connected: nothing can be concluded from its cache
	}
	// Counted before settling: a record settling drops is still counted
	// as serving its claim until the next pass.
	recs, err := s.liveCounted(ctx, envID, cluster)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := s.settle(ctx, cluster, rec); err != nil && ctx.Err() == nil {
			// One stuck volume must not stop the others.
			s.log.WarnContext(ctx, "reconcile volume", "environment", envID, "volume", rec.ID, "error", err)
		}
	}
	return nil
}

// settle brings one record and its claim into agreement.
func (s *Service) settle(ctx context.Context, cluster *clusters.Cluster, rec record) error {
	pvc, exists := cluster.PVC(rec.Spec.Namespace, rec.ID)
	switch {
	case exists && rec.Status == status.Deleting && pvc.DeletionTimestamp == nil:
		// A create finished after the volume was deleted: the claim is unwanted.
		err := cluster.Client().CoreV1().PersistentVolumeClaims(rec.Spec.Namespace).Delete(ctx, rec.ID, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	case exists && rec.PVCUID == "" && !createdByGateway(pvc):
		// Another provider's claim of the same name, found by a create
		// that stopped before refusing it: never adopted implicitly.
		s.log.WarnContext(ctx, "a create found another provider's claim of its name; dropping its record",
			"environment", rec.EnvironmentID, "volume", rec.ID, "namespace", rec.Spec.Namespace)
		s.forget(ctx, rec)
		return nil
	case exists && rec.PVCUID != string(pvc.UID):
		claim, err := s.claims.Claim(rec.EnvironmentID)
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, s.repo.db, func(tx pgx.Tx) error {
			if err := membership.Hold(ctx, tx, claim); err != nil {
				return err
			}
			_, err := s.repo.setClaim(ctx, tx, rec.EnvironmentID, rec.ID, string(pvc.UID))
			return err
		})
	case exists:
		return nil
	case claimGone(cluster, rec):
		err := s.recorder.Record(ctx, status.Observation{EnvironmentID: rec.EnvironmentID, VolumeID: rec.ID,
			Status: status.Deleted, Message: "the claim no longer exists"})
		return err
	case rec.PVCUID == "" && time.Since(rec.CreateTime) > createSettle:
		s.log.InfoContext(ctx, "completing an interrupted volume create", "environment", rec.EnvironmentID, "volume", rec.ID)
		_, err := s.createClaim(ctx, cluster, rec)
		return err
	}
	return nil
}
