package snapshots

import (
	"context"
	"time"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/controller"
	"github.com/dcm-project/storage-gateway/internal/membership"
)

// unsyncedRetry is when an environment whose snapshot cache has not synced
// yet is looked at again.
const unsyncedRetry = 2 * time.Second

// NewReconciler returns the snapshot reconciler. For each environment
// this replica is connected to and that has a snapshot not yet DELETED —
// looked at whenever one of its VolumeSnapshots or its cluster's health
// changes, and at each interval's sweep — it follows the environment's
// VolumeSnapshots, records each snapshot's state as the cluster shows it,
// creates the VolumeSnapshot of a create interrupted before it existed,
// and records DELETED once one is gone.
func (s *Service) NewReconciler(interval time.Duration) *controller.Controller {
	c := controller.New(controller.Options{Name: "snapshots", Logger: s.log,
		List:      s.withSnapshots,
		Reconcile: s.reconcile,
	})
	controller.Watch(c, s.clusters.Subscribe(), func(ch clusters.Change) []string {
		switch ch.Kind {
		case clusters.SnapshotChanged, clusters.HealthChanged:
			return []string{ch.EnvironmentID}
		}
		return nil
	})
	c.Sweep(interval, s.withSnapshots)
	return c
}

// withSnapshots names the environments connected here that have a
// snapshot not yet DELETED.
func (s *Service) withSnapshots(ctx context.Context) ([]string, error) {
	return s.repo.withLive(ctx, s.clusters.IDs())
}

func (s *Service) reconcile(ctx context.Context, envID string) (time.Duration, error) {
	cluster, lease, err := s.volumes.Writable(envID)
	if err != nil {
		return 0, nil // not owned, connected or synced: its cache tells nothing yet
	}
	recs, err := s.repo.live(ctx, envID)
	if err != nil || len(recs) == 0 {
		return 0, err
	}
	cluster.FollowSnapshots()
	var requeue time.Duration
	for _, rec := range recs {
		waiting, err := s.settle(ctx, cluster, lease, rec)
		if err != nil && ctx.Err() == nil {
			// One stuck snapshot must not stop the others.
			s.log.WarnContext(ctx, "reconcile snapshot", "environment", envID, "snapshot", rec.ID, "error", err)
		}
		if waiting {
			requeue = unsyncedRetry
		}
	}
	return requeue, nil
}

// settle brings one record up to date with its VolumeSnapshot; waiting
// says the cache cannot tell yet.
func (s *Service) settle(ctx context.Context, cluster clusters.Live, lease membership.Lease, rec record) (waiting bool, err error) {
	vs, found, synced := cluster.Snapshot(rec.Namespace, rec.ID)
	switch {
	case !synced:
		return true, nil
	case found && !ours(vs, rec):
		return false, nil // another's of the same name: the create that found it refused and dropped the record
	case found && rec.Status == Deleting && vs.DeletionTimestamp == nil:
		return false, nil // the deletion asked for is not in the cache yet
	case found:
		o := observe(vs)
		if o == (observation{Status: rec.Status, Message: rec.Message, RestoreSize: rec.RestoreSize}) && rec.UID == string(vs.UID) {
			return false, nil
		}
		return false, s.record(ctx, rec, o, string(vs.UID), lease)
	case gone(rec):
		return false, s.record(ctx, rec, observation{Status: Deleted, Message: "the snapshot no longer exists", RestoreSize: rec.RestoreSize}, "", lease)
	case rec.UID == "" && settled(rec, createSettle):
		s.log.InfoContext(ctx, "completing an interrupted snapshot create", "environment", rec.EnvironmentID, "snapshot", rec.ID)
		_, err := s.createObject(ctx, cluster, lease, rec)
		return false, err
	}
	return false, nil
}
