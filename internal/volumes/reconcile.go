package volumes

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/controller"
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
// changes, and at each interval's sweep while it can need it — it repairs
// what an interrupted flow left behind: a record whose claim was never
// created gets it; a record whose claim exists but whose uid was never
// stored gets the uid; a claim created after its volume was deleted is
// deleted; a volume whose claim vanished — also while the gateway was down
// or disconnected — is reported DELETED; a tier state not reported yet is
// reported (tier_events.go), looked at also whenever a claim's tier moves.
// Claims without a record are never touched, only counted (the
// environment's unadopted_volume_count: another provider's, until an admin
// adopts them).
//
// The sweep, not a per-environment timer, brings the periodic looks: an
// environment with no live volume, no labelled claim in its cache and its
// zero count already written has nothing to repair, and a fleet is mostly
// such environments — a pass over each would cost three statements per
// environment per interval. Each sweep (the first when the reconciler
// starts) also forgets the idempotency keys past their retention,
// fleet-wide in one statement.
func (s *Service) NewReconciler(interval time.Duration) *controller.Controller {
	c := controller.New(controller.Options{Name: "volumes", Logger: s.log,
		List: func(context.Context) ([]string, error) { return s.clusters.IDs(), nil },
		Reconcile: func(ctx context.Context, envID string) (time.Duration, error) {
			return 0, s.reconcile(ctx, envID)
		},
	})
	controller.Watch(c, s.clusters.Subscribe(), func(ch clusters.Change) []string {
		if ch.Kind == clusters.HealthChanged {
			return []string{ch.EnvironmentID}
		}
		return nil
	})
	s.followTiers(c.Add)
	c.Sweep(interval, func(ctx context.Context) ([]string, error) {
		s.forgetExpiredKeys(ctx)
		return s.unsettled(ctx)
	})
	return c
}

// unsettled names the environments connected here whose volumes can need
// repair: those with a live volume record (one query for all of them),
// those whose cache holds a labelled claim (the unadopted count may have
// changed) and those whose zero count was not yet written under the lease
// held now (never looked at, or not synced when last looked at).
func (s *Service) unsettled(ctx context.Context) ([]string, error) {
	connected := s.clusters.IDs()
	withVolumes, err := s.repo.withLiveVolumes(ctx, connected)
	if err != nil {
		return connected, err // look at every one rather than none
	}
	hasVolumes := make(map[string]bool, len(withVolumes))
	for _, id := range withVolumes {
		hasVolumes[id] = true
	}
	s.counted.Lock()
	defer s.counted.Unlock()
	return slices.DeleteFunc(connected, func(envID string) bool {
		if hasVolumes[envID] {
			return false
		}
		cluster, ok := s.clusters.Live(envID)
		lease, err := s.leases.Lease(envID)
		if !ok || err != nil {
			return false // reconcile decides; it is cheap when nothing is writable
		}
		epoch, counted := s.counted.zero[envID]
		if !counted || epoch != lease.Epoch {
			return false
		}
		// Counted, so the reconciler read the installation's identity.
		o, err := s.owner(ctx, envID)
		return err == nil && !slices.ContainsFunc(cluster.PVCs(), o.unserved)
	}), nil
}

// forgetExpiredKeys forgets every environment's idempotency keys past
// their retention (whichever replica owns it: the keys are unfenced, and
// a redelivery after keyRetention is not promised to replay).
func (s *Service) forgetExpiredKeys(ctx context.Context) {
	if n, err := s.repo.purgeKeys(ctx, keyRetention); err != nil {
		if ctx.Err() == nil {
			s.log.ErrorContext(ctx, "purge idempotency keys", "error", err)
		}
	} else if n > 0 {
		s.log.InfoContext(ctx, "idempotency keys purged", "count", n)
	}
}

// ReconcileEnvironment runs one pass over one environment.
func (s *Service) ReconcileEnvironment(ctx context.Context, envID string) {
	if err := s.reconcile(ctx, envID); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "reconcile volumes", "environment", envID, "error", err)
	}
}

func (s *Service) reconcile(ctx context.Context, envID string) error {
	cluster, lease, err := s.Writable(envID)
	if err != nil {
		if _, connected := s.clusters.Live(envID); !connected {
			s.counted.Lock()
			delete(s.counted.zero, envID) // counted again if it comes back
			s.counted.Unlock()
		}
		return nil // not connected, or not synced: nothing can be concluded from its cache
	}
	// Counted before settling: a record settling drops is still counted
	// as serving its claim until the next pass.
	recs, err := s.liveCounted(ctx, envID, cluster, lease)
	if err != nil {
		return err
	}
	o, err := s.owner(ctx, envID)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := s.settle(ctx, cluster, lease, o, rec); err != nil && ctx.Err() == nil {
			// One stuck volume must not stop the others.
			s.log.WarnContext(ctx, "reconcile volume", "environment", envID, "volume", rec.ID, "error", err)
		}
	}
	if err := s.reportTiers(ctx, cluster, lease, recs); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "report tier changes", "environment", envID, "error", err)
	}
	return nil
}

// settlement is what a record and its claim need to agree.
type settlement int

const (
	settled        settlement = iota // nothing, or nothing yet
	deleteUnwanted                   // a create finished after the volume was deleted: the claim is unwanted
	dropForeign                      // a claim of the same name not the environment's, found by a create that stopped before refusing it
	recordClaimUID                   // the claim (a new one of the same name) is not the one recorded
	labelOwner                       // the claim, made before claims named their owner, gets the owner labels
	recordDeleted                    // the claim is gone
	completeCreate                   // a create stopped before its claim existed
)

// settlementOf decides what rec and its claim (as the cluster's cache
// shows it; returned, nil when there is none or it is not rec's) need,
// for o, the environment of rec. A claim of rec's name that is not o's —
// another provider's, another environment's, another installation's — is
// never adopted implicitly: a record that never held a claim is dropped,
// one whose claim was replaced by another's reports its own as deleted. A
// create younger than createSettle may still be under way.
func settlementOf(cluster clusters.Live, o owner, rec record) (settlement, *corev1.PersistentVolumeClaim) {
	pvc, exists := cluster.PVC(rec.Spec.Namespace, rec.ID)
	if exists && o.holderOf(pvc, rec.ID, rec.PVCUID) != heldHere {
		if rec.PVCUID == "" {
			return dropForeign, pvc
		}
		return recordDeleted, nil
	}
	switch {
	case exists && rec.Status == status.Deleting && pvc.DeletionTimestamp == nil:
		return deleteUnwanted, pvc
	case exists && rec.PVCUID != string(pvc.UID):
		return recordClaimUID, pvc
	case exists && createdByGateway(pvc) && pvc.Labels[InstallationLabel] == "":
		return labelOwner, pvc
	case exists:
		return settled, pvc
	case claimGone(cluster, o, rec):
		return recordDeleted, nil
	case rec.PVCUID == "" && time.Since(rec.CreateTime) > createSettle:
		return completeCreate, nil
	}
	return settled, nil
}

// settle brings one record and its claim into agreement.
func (s *Service) settle(ctx context.Context, cluster clusters.Live, lease membership.Lease, o owner, rec record) error {
	what, pvc := settlementOf(cluster, o, rec)
	switch what {
	case deleteUnwanted:
		err := cluster.Client().PersistentVolumeClaims(rec.Spec.Namespace).Delete(ctx, rec.ID, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pvc.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone, or replaced meanwhile: the next pass looks again
		}
		return err
	case dropForeign:
		s.log.WarnContext(ctx, "a create found a claim of its name that is not the environment's; dropping its record",
			"environment", rec.EnvironmentID, "volume", rec.ID, "namespace", rec.Spec.Namespace)
		s.forget(ctx, lease, rec)
	case labelOwner:
		err := s.labelOwner(ctx, cluster, o, pvc)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // replaced or changed meanwhile: the next pass looks again
		}
		return err
	case recordClaimUID:
		return pgx.BeginFunc(ctx, s.repo.db, func(tx pgx.Tx) error {
			if err := membership.Hold(ctx, tx, lease); err != nil {
				return err
			}
			_, err := s.repo.setClaim(ctx, tx, rec.EnvironmentID, rec.ID, string(pvc.UID))
			return err
		})
	case recordDeleted:
		return s.recorder.Record(ctx, lease, status.Observation{EnvironmentID: rec.EnvironmentID, VolumeID: rec.ID,
			Status: status.Deleted, Message: "the claim no longer exists"})
	case completeCreate:
		s.log.InfoContext(ctx, "completing an interrupted volume create", "environment", rec.EnvironmentID, "volume", rec.ID)
		env, err := s.environment(ctx, rec.EnvironmentID)
		if err != nil {
			return err
		}
		_, err = s.createClaim(ctx, env, cluster, lease, rec)
		return err
	}
	return nil
}

// labelOwner writes o's owner labels on pvc: a claim o's record holds
// that a gateway made before claims named their owner, or one an adoption
// takes over. (Claims adopted from DCM's storage SP are left as they are,
// served by the uid o's record holds: adoption writes nothing to them.) Once labelled, it is found as o's by label like every
// newer claim, and an admin can select it. The patch names the claim's uid
// and resource version, so a claim replaced or changed meanwhile is
// refused (Conflict) rather than relabelled unseen.
func (s *Service) labelOwner(ctx context.Context, cluster clusters.Live, o owner, pvc *corev1.PersistentVolumeClaim) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": pvc.UID, "resourceVersion": pvc.ResourceVersion,
		"labels": map[string]string{InstallationLabel: o.installation, EnvironmentLabel: o.environment},
	}})
	if err != nil {
		return err
	}
	_, err = cluster.Client().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		s.log.InfoContext(ctx, "owner labels written on a claim",
			"environment", o.environment, "volume", pvc.Name, "namespace", pvc.Namespace)
	}
	return err
}
