package volumes

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// Tier is a volume's performance tier, a VolumeAttributesClass (not part
// of DCM's contract): what its claim asks for, what it is on, and a change
// under way or refused.
type Tier struct {
	Requested, Current string
	// Status is PENDING, IN_PROGRESS or INFEASIBLE while the volume is not
	// on Requested; empty once it is.
	Status  string
	Message string
}

// modifyFailedReason is the reason of the event the external-resizer
// writes when the driver refuses a change of tier.
const modifyFailedReason = "VolumeModifyFailed"

// tierOf reads a claim's tier (nil when it never asked for one). A
// modification status that names another class than the claim asks for is
// left over from a refused change the claim no longer asks for (the
// external-resizer keeps it after a revert): it says nothing of now.
func tierOf(cluster clusters.Live, pvc *corev1.PersistentVolumeClaim) *Tier {
	requested := ptr.Deref(pvc.Spec.VolumeAttributesClassName, "")
	if requested == "" {
		return nil
	}
	t := &Tier{Requested: requested, Current: ptr.Deref(pvc.Status.CurrentVolumeAttributesClassName, "")}
	if m := pvc.Status.ModifyVolumeStatus; m != nil && m.TargetVolumeAttributesClassName == requested {
		t.Status = string(m.Status)
	} else if t.Current != requested {
		t.Status = string(corev1.PersistentVolumeClaimModifyVolumePending)
	}
	switch t.Status {
	case "":
		return t
	case string(corev1.PersistentVolumeClaimModifyVolumeInProgress):
		t.Status = "IN_PROGRESS"
	default:
		t.Status = strings.ToUpper(t.Status)
	}
	for _, e := range cluster.WarningEvents(pvc.Namespace, pvc.Name) {
		if e.Reason == modifyFailedReason && strings.Contains(e.Message, requested) {
			t.Message = status.Clean(e.Message)
			break
		}
	}
	return t
}

// refusalWait is how long a change of tier waits for the driver's answer,
// so a tier it refuses is refused to the caller, naming the field, rather
// than only shown on the volume later. A driver slower than that answers
// through the volume's tier and its events.
const refusalWait = 5 * time.Second

// Retier asks for a volume's claim to be on another performance tier: a
// VolumeAttributesClass of the volume's CSI driver, checked against the
// cluster's before the claim is patched (where the gateway may list them;
// otherwise the cluster decides). A tier the driver refuses within
// refusalWait is refused, and the claim asks for the tier it asked for
// before again (a claim that never asked for one cannot ask for none
// again: it keeps asking, INFEASIBLE, until another tier is asked for).
func (s *Service) Retier(ctx context.Context, envID, id, tier string) (Volume, error) {
	if len(validation.IsDNS1123Subdomain(tier)) > 0 {
		return Volume{}, fault.Invalid("tier", "must be a VolumeAttributesClass name")
	}
	rec, cluster, lease, pvc, err := s.claimToChange(ctx, envID, id, "retier")
	if err != nil {
		return Volume{}, err
	}
	if err := Bound(pvc, "retier"); err != nil {
		return Volume{}, err
	}
	if err := checkTier(cluster, pvc, tier); err != nil {
		return Volume{}, err
	}
	previous := ptr.Deref(pvc.Spec.VolumeAttributesClassName, "")
	patched, err := s.askTier(ctx, cluster, rec, tier)
	if err != nil {
		return Volume{}, err
	}
	s.log.InfoContext(ctx, "volume tier change requested", "environment", envID, "volume", id, "tier", tier)
	if previous != tier {
		// The volume changed: its update_time says when, as an
		// expansion's does.
		if rec.UpdateTime, err = s.repo.touch(ctx, envID, id, lease); err != nil {
			s.log.WarnContext(ctx, "record a tier change's time", "environment", envID, "volume", id, "error", err)
		}
	}
	if previous == tier {
		return s.fromClaim(cluster, rec, patched), nil
	}
	latest, refused := s.driverAnswer(ctx, cluster, rec, tier, patched)
	if refused == nil {
		return s.fromClaim(cluster, rec, latest), nil
	}
	detail := fmt.Sprintf("the driver refused %s: %s", tier, cmp.Or(refused.Message, "no reason given yet"))
	if previous == "" {
		detail += "; the volume asks for it until another tier is asked for"
	} else if _, err := s.askTier(context.WithoutCancel(ctx), cluster, rec, previous); err != nil {
		s.log.WarnContext(ctx, "ask for a volume's previous tier again after the driver refused a new one",
			"environment", envID, "volume", id, "tier", previous, "error", err)
		detail += fmt.Sprintf("; asking for %s again failed: the volume asks for %s until another tier is asked for", previous, tier)
	}
	return Volume{}, &fault.Error{Kind: fault.FailedPrecondition, Field: "tier", Detail: detail}
}

// askTier patches the claim to ask for tier.
func (s *Service) askTier(ctx context.Context, cluster clusters.Live, rec record, tier string) (*corev1.PersistentVolumeClaim, error) {
	patch := fmt.Appendf(nil, `{"spec":{"volumeAttributesClassName":%q}}`, tier)
	writeCtx, cancel := s.clusterWrite(ctx)
	defer cancel()
	patched, err := cluster.Client().PersistentVolumeClaims(rec.Spec.Namespace).Patch(writeCtx, rec.ID, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, kubernetesError(err, "change the claim's tier")
	}
	return patched, nil
}

// driverAnswer watches the claim in the cache, for at most refusalWait,
// until the volume is on tier or the driver refused it (with its reason,
// once its event is cached too); it returns the claim as last seen (the
// patched one until the cache has it), and the refusal if there was one.
func (s *Service) driverAnswer(ctx context.Context, cluster clusters.Live, rec record, tier string,
	patched *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, *Tier) {
	latest := patched
	var refused *Tier
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, min(refusalWait, s.writeTimeout), true, func(context.Context) (bool, error) {
		pvc, ok := cluster.PVC(rec.Spec.Namespace, rec.ID)
		if !ok {
			return false, nil
		}
		latest = pvc
		t := tierOf(cluster, pvc)
		switch {
		case t == nil || t.Requested != tier: // the cache has not seen the patch yet
			return false, nil
		case t.Status == "INFEASIBLE":
			refused = t
			return t.Message != "", nil
		}
		return t.Status == "", nil
	})
	return latest, refused
}

// checkTier refuses a tier the cluster does not have or that another
// driver than the claim's serves.
func checkTier(cluster clusters.Live, pvc *corev1.PersistentVolumeClaim, tier string) error {
	objs := cluster.StorageObjects()
	if objs.TiersDenied {
		return nil
	}
	class, _ := cluster.ClassOf(pvc)
	if class == nil {
		return &fault.Error{Kind: fault.FailedPrecondition, Field: "tier", Detail: "the volume's storage class is gone: its driver, and so its tiers, are unknown"}
	}
	var offered []string
	for _, t := range objs.Tiers {
		if t.DriverName == class.Provisioner {
			offered = append(offered, t.Name)
		}
	}
	if slices.Contains(offered, tier) {
		return nil
	}
	choices := "; the driver has none"
	if len(offered) > 0 {
		choices = "; name one of: " + strings.Join(offered, ", ")
	}
	for _, t := range objs.Tiers {
		if t.Name == tier {
			return &fault.Error{Kind: fault.FailedPrecondition, Field: "tier", Detail: fmt.Sprintf(
				"%s is for driver %s; storage class %s uses %s%s", tier, t.DriverName, class.Name, class.Provisioner, choices)}
		}
	}
	// One created since the classes were last listed: they are listed
	// again within seconds.
	cluster.StorageRequested()
	return &fault.Error{Kind: fault.FailedPrecondition, Field: "tier",
		Detail: fmt.Sprintf("VolumeAttributesClass %s does not exist in the cluster (one created just now is seen within seconds)%s", tier, choices)}
}
