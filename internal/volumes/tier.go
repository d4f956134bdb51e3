package volumes

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
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

// Retier asks for a volume's claim to be on another performance tier: a
// VolumeAttributesClass of the volume's CSI driver, checked against the
// cluster's before the claim is patched (where the gateway may list them;
// otherwise the cluster decides).
func (s *Service) Retier(ctx context.Context, envID, id, tier string) (Volume, error) {
	if len(validation.IsDNS1123Subdomain(tier)) > 0 {
		return Volume{}, fault.Invalid("tier", "must be a VolumeAttributesClass name")
	}
	rec, cluster, _, pvc, err := s.claimToChange(ctx, envID, id, "retier")
	if err != nil {
		return Volume{}, err
	}
	if err := bound(pvc, "retier"); err != nil {
		return Volume{}, err
	}
	if err := checkTier(cluster, pvc, tier); err != nil {
		return Volume{}, err
	}
	patch := fmt.Appendf(nil, `{"spec":{"volumeAttributesClassName":%q}}`, tier)
	writeCtx, cancel := s.clusterWrite(ctx)
	defer cancel()
	patched, err := cluster.Client().PersistentVolumeClaims(rec.Spec.Namespace).Patch(writeCtx, id, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return Volume{}, kubernetesError(err, "change the claim's tier")
	}
	s.log.InfoContext(ctx, "volume tier change requested", "environment", envID, "volume", id, "tier", tier)
	return s.fromClaim(cluster, rec, patched), nil
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
