package volumes

import (
	"context"
	"time"

	"github.com/dcm-project/storage-gateway/internal/status"
)

// Reconciler timing: intents younger than settleAfter may still be in the
// middle of a create; idempotency keys are kept at least keyRetention.
const (
	settleAfter  = 10 * time.Second
	keyRetention = 24 * time.Hour
)

// RunReconciler repairs what an interrupted flow left behind, once per
// interval until ctx ends: a record whose claim was never created gets it,
// a claim created but not recorded gets recorded, a deletion that finished
// is marked DELETED. It also forgets idempotency keys past their retention.
func (s *Service) RunReconciler(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
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
		if err := s.reconcile(ctx, envID); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "reconcile volumes", "environment", envID, "error", err)
		}
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
		pvc, exists := cluster.PVC(rec.Spec.Namespace, rec.ID)
		switch {
		case exists && rec.PVCUID != string(pvc.UID):
			err = s.repo.setClaim(ctx, envID, rec.ID, string(pvc.UID))
		case exists, time.Since(rec.UpdateTime) < settleAfter:
			continue // present, or too recent for the cache to have caught up
		case claimGone(cluster, rec):
			err = s.repo.setStatus(ctx, envID, rec.ID, status.Deleted, "the claim no longer exists")
		default:
			s.log.InfoContext(ctx, "completing an interrupted volume create", "environment", envID, "volume", rec.ID)
			_, err = s.createClaim(ctx, cluster, rec)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
