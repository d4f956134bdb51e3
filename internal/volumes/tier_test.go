package volumes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/clusters/clusterstest"
)

// TestTierOfReadsTheClaim: what a claim asks for, what it is on, and a
// change under way or refused — not a refusal the claim no longer asks for.
func TestTierOfReadsTheClaim(t *testing.T) {
	refused := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "dcm"}, Type: corev1.EventTypeWarning, Reason: modifyFailedReason,
		Message:        `rpc error: code = InvalidArgument desc = tier "platinum" is not one of the driver's`,
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "dcm", Name: "v"}}
	claim := func(requested, current string, modify *corev1.ModifyVolumeStatus) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "v", Namespace: "dcm"}}
		if requested != "" {
			pvc.Spec.VolumeAttributesClassName = &requested
		}
		if current != "" {
			pvc.Status.CurrentVolumeAttributesClassName = &current
		}
		pvc.Status.ModifyVolumeStatus = modify
		return pvc
	}
	for _, tt := range []struct {
		name string
		pvc  *corev1.PersistentVolumeClaim
		want *Tier
	}{
		{"never asked for one", claim("", "", nil), nil},
		{"on it", claim("gold", "gold", nil), &Tier{Requested: "gold", Current: "gold"}},
		{"not started", claim("gold", "silver", nil), &Tier{Requested: "gold", Current: "silver", Status: "PENDING"}},
		{"under way", claim("gold", "silver", &corev1.ModifyVolumeStatus{TargetVolumeAttributesClassName: "gold",
			Status: corev1.PersistentVolumeClaimModifyVolumeInProgress}), &Tier{Requested: "gold", Current: "silver", Status: "IN_PROGRESS"}},
		{"refused, with the driver's reason", claim("platinum", "gold", &corev1.ModifyVolumeStatus{TargetVolumeAttributesClassName: "platinum",
			Status: corev1.PersistentVolumeClaimModifyVolumeInfeasible}),
			&Tier{Requested: "platinum", Current: "gold", Status: "INFEASIBLE", Message: refused.Message}},
		{"a refusal the claim no longer asks for", claim("gold", "gold", &corev1.ModifyVolumeStatus{TargetVolumeAttributesClassName: "platinum",
			Status: corev1.PersistentVolumeClaimModifyVolumeInfeasible}), &Tier{Requested: "gold", Current: "gold"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tierOf(clusterstest.New(refused), tt.pvc)
			if ptr.Deref(got, Tier{}) != ptr.Deref(tt.want, Tier{}) || (got == nil) != (tt.want == nil) {
				t.Fatalf("tierOf = %+v, want %+v", got, tt.want)
			}
		})
	}
	if !tierFieldsDiffer(claim("gold", "silver", nil), claim("gold", "gold", nil)) || tierFieldsDiffer(claim("gold", "gold", nil), claim("gold", "gold", nil)) {
		t.Fatal("tierFieldsDiffer does not tell a tier applied from no change")
	}
}
