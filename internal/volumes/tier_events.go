package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// The CloudEvents of tier changes: on a subject of their own, apart from
// DCM's volume events (outbox.Subject, whose stream captures dcm.* — one
// token — and so not this subject), with the same source and environment
// extension.
const (
	TierEventType    = "dcm.status.storage.tier"
	TierEventSubject = "dcm.storage.tiers"
)

// tierEventIDSpace makes tier event ids deterministic: a volume's tier
// transition always gets the same id, so JetStream drops a retried publish.
var tierEventIDSpace = uuid.MustParse("a3c1e7d2-5b4f-4e8a-9c6d-1f2e3a4b5c6d")

// tierEventData is a tier event's data.
type tierEventData struct {
	ID        string `json:"id"`
	Requested string `json:"requested"`
	Current   string `json:"current,omitempty"`
	Status    string `json:"status,omitempty"`
	Message   string `json:"message,omitempty"`
}

// key is what a tier event reports: a change of any part is a new event.
func (t Tier) key() string {
	b, _ := json.Marshal(tierEventData{Requested: t.Requested, Current: t.Current, Status: t.Status, Message: t.Message})
	return string(b)
}

// followTiers has c look at an environment whenever one of its claims
// asks for another tier or its tier's state moves: its own informers'
// changes, handed over by the pool (what a sweep would find later).
func (s *Service) followTiers(add func(envID string)) {
	s.clusters.FollowPVCs(func(envID string) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Spec.VolumeAttributesClassName != nil {
					add(envID)
				}
			},
			UpdateFunc: func(old, obj any) {
				before, ok1 := old.(*corev1.PersistentVolumeClaim)
				after, ok2 := obj.(*corev1.PersistentVolumeClaim)
				if ok1 && ok2 && tierFieldsDiffer(before, after) {
					add(envID)
				}
			},
		}
	})
}

func tierFieldsDiffer(a, b *corev1.PersistentVolumeClaim) bool {
	return ptr.Deref(a.Spec.VolumeAttributesClassName, "") != ptr.Deref(b.Spec.VolumeAttributesClassName, "") ||
		ptr.Deref(a.Status.CurrentVolumeAttributesClassName, "") != ptr.Deref(b.Status.CurrentVolumeAttributesClassName, "") ||
		ptr.Deref(a.Status.ModifyVolumeStatus, corev1.ModifyVolumeStatus{}) != ptr.Deref(b.Status.ModifyVolumeStatus, corev1.ModifyVolumeStatus{})
}

// reportTiers reports, for each of an environment's volumes whose claim
// asks for a tier, a tier state that differs from the one last reported:
// the state and its CloudEvent in one fenced transaction.
func (s *Service) reportTiers(ctx context.Context, cluster clusters.Live, lease membership.Lease, recs []record) error {
	var errs []error
	for _, rec := range recs {
		pvc, ok := cluster.PVC(rec.Spec.Namespace, rec.ID)
		if !ok || rec.Status == status.Deleting {
			continue
		}
		t := tierOf(cluster, pvc)
		if t == nil || t.key() == rec.ReportedTier {
			continue
		}
		errs = append(errs, s.reportTier(ctx, lease, rec, *t))
	}
	return errors.Join(errs...)
}

func (s *Service) reportTier(ctx context.Context, lease membership.Lease, rec record, t Tier) error {
	env, err := s.envs.Spec(ctx, rec.EnvironmentID)
	if err != nil {
		return err
	}
	return s.recorder.Outbox.Tx(ctx, func(tx outbox.Tx) error {
		if err := membership.Hold(ctx, tx, lease); err != nil {
			return err
		}
		var transition int64
		var created time.Time
		err := tx.QueryRow(ctx, `UPDATE volumes SET reported_tier = $3, tier_transitions = tier_transitions + 1
			WHERE environment_id = $1 AND id = $2 AND reported_tier <> $3 AND status NOT IN ('DELETING', 'DELETED')
			RETURNING tier_transitions, create_time`, rec.EnvironmentID, rec.ID, t.key()).Scan(&transition, &created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // reported meanwhile, or the volume is going
		}
		if err != nil {
			return err
		}
		e, err := tierEvent(rec, t, env.Spec.DCM.ProviderName, created, transition, lease.Epoch)
		if err != nil {
			return err
		}
		return outbox.InsertTx(ctx, tx, e)
	})
}

// tierEvent is the outbox row of a volume's transition-th tier state.
func tierEvent(rec record, t Tier, provider string, created time.Time, transition, epoch int64) (outbox.Event, error) {
	id := uuid.NewSHA1(tierEventIDSpace, fmt.Appendf(nil, "%s/%s/%d/%d", rec.EnvironmentID, rec.ID, created.UnixMicro(), transition)).String()
	data, err := status.NewEvent(id, provider, rec.EnvironmentID, TierEventType, TierEventSubject,
		tierEventData{ID: rec.ID, Requested: t.Requested, Current: t.Current, Status: t.Status, Message: t.Message})
	return outbox.Event{ID: id, EnvironmentID: rec.EnvironmentID, VolumeID: outbox.OrderKey("tier", rec.ID), Subject: TierEventSubject,
		Status: t.Status, Data: data, Epoch: epoch}, err
}
