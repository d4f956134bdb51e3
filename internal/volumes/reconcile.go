package volumes

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/controller"
	"github.com/dcm-project/storage-gateway/internal/fault"
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

// NewReconciler returns the volume reconciler. For each environment this
// replica is connected to — looked at whenever its cluster's health
// changes, then once per interval while it is registered — it repairs what an interrupted
// flow left behind: a record whose claim was never created gets it; a
// record whose claim exists but whose uid was never stored gets the uid; a
// claim created after its volume was deleted is deleted; a volume whose
// claim vanished — also while the gateway was down or disconnected — is
// reported DELETED; idempotency keys past their retention are forgotten.
// Claims without a record are never touched, only counted (the
// environment's unadopted_volume_count: another provider's, until an admin
// adopts them).
func (s *Service) NewReconciler(interval time.Duration) *controller.Controller {
	c := controller.New(controller.Options{Name: "volumes", Logger: s.log,
		List: func(context.Context) ([]string, error) { return s.clusters.IDs(), nil },
		Reconcile: func(ctx context.Context, envID string) (time.Duration, error) {
			if err := s.reconcile(ctx, envID); err != nil {
				return 0, err
			}
			// Looked at again while registered, connected here or not: a
			// connection that comes back without a notice this reconciler
			// acts on is still reconciled within an interval.
			if err := s.envs.Exists(ctx, envID); fault.Is(err, fault.NotFound) {
				return 0, nil
			}
			return interval, nil
		},
	})
	controller.Watch(c, s.clusters.Subscribe(), func(ch clusters.Change) []string {
		if ch.Kind == clusters.HealthChanged {
			return []string{ch.EnvironmentID}
		}
		return nil
	})
	return c
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
		if _, connected := s.clusters.Get(envID); !connected {
			s.counted.Lock()
			delete(s.counted.zero, envID) // counted again if it comes back
			s.counted.Unlock()
		}
		return nil // not connected, or not synced: nothing can be concluded from its cache
	}
	if n, err := s.repo.purgeKeys(ctx, envID, keyRetention); err != nil {
		s.log.ErrorContext(ctx, "purge idempotency keys", "environment", envID, "error", err)
	} else if n > 0 {
		s.log.InfoContext(ctx, "idempotency keys purged", "environment", envID, "count", n)
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
