package volumes

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/clusters"
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

// RunReconciler repairs what an interrupted flow left behind, once per
// interval and for each environment received on resynced (its cache just
// (re)synced), until ctx ends: a record whose claim was never created gets
// it, a claim created but not recorded gets recorded, a volume whose claim
// vanished — also while the gateway was down or disconnected — is reported
// DELETED. It also forgets idempotency keys past their retention.
func (s *Service) RunReconciler(ctx context.Context, interval time.Duration, resynced <-chan string) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case envID := <-resynced:
			s.ReconcileEnvironment(ctx, envID)
		case <-t.C:
			s.ReconcileAll(ctx)
		}
	}
}

// ReconcileAll runs one reconciliation pass over every connected environment.
func (s *Service) ReconcileAll(ctx context.Context) {
	if n, err := s.repo.purgeKeys(ctx, keyRetention); err != nil {
		s.log.ErrorContext(ctx, "purge idempotency keys", "error", err)
	} else if n > 0 {
		s.log.InfoContext(ctx, "idempotency keys purged", "count", n)
	}
	envs, err := s.repo.environmentsWithVolumes(ctx)
	if err != nil {
		s.log.ErrorContext(ctx, "list environments to reconcile", "error", err)
		return
	}
	for _, envID := range envs {
		s.ReconcileEnvironment(ctx, envID)
	}
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
	recs, err := s.repo.live(ctx, envID)
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
	case exists && rec.PVCUID != string(pvc.UID):
		_, err := s.repo.setClaim(ctx, rec.EnvironmentID, rec.ID, string(pvc.UID))
		return err
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
