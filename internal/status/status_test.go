package status_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/status"
)

func claim(phase corev1.PersistentVolumeClaimPhase, edit func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		Spec: corev1.PersistentVolumeClaimSpec{
			VolumeName: "pv-1",
			Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: phase},
	}
	if phase == corev1.ClaimBound {
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	}
	if edit != nil {
		edit(pvc)
	}
	return pvc
}

func TestOf(t *testing.T) {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	lazy := &storagev1.StorageClass{VolumeBindingMode: &wffc}
	warning := &corev1.Event{Reason: "ProvisioningFailed", Message: "out of disks"}
	now := metav1.Now()
	tests := []struct {
		name     string
		pvc      *corev1.PersistentVolumeClaim
		class    *storagev1.StorageClass
		warnings []*corev1.Event
		want     status.Status
		message  string
	}{
		{"bound", claim(corev1.ClaimBound, nil), nil, nil, status.Running, "bound to volume pv-1"},
		{"pending", claim(corev1.ClaimPending, nil), nil, nil, status.Provisioning, "waiting for the provisioner"},
		{"first consumer", claim(corev1.ClaimPending, nil), lazy, nil, status.Provisioning, "waiting for first consumer"},
		{"first consumer scheduled", claim(corev1.ClaimPending, func(p *corev1.PersistentVolumeClaim) {
			p.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "n1"}
		}), lazy, nil, status.Provisioning, "waiting for the provisioner"},
		{"provisioning warning", claim(corev1.ClaimPending, nil), nil, []*corev1.Event{warning}, status.Provisioning, "provisioning: ProvisioningFailed: out of disks"},
		{"hostile warning", claim(corev1.ClaimPending, nil), nil, []*corev1.Event{{Reason: "Bad", Message: "line1\nline2\x1b[31m" + strings.Repeat("x", 400)}},
			status.Provisioning, "provisioning: Bad: line1 line2 [31m" + strings.Repeat("x", 255-len("Bad: line1 line2 [31m")) + "…"},
		{"lost", claim(corev1.ClaimLost, nil), nil, nil, status.Failed, "the claim lost its volume pv-1"},
		{"deleting", claim(corev1.ClaimBound, func(p *corev1.PersistentVolumeClaim) { p.DeletionTimestamp = &now }), nil, nil, status.Deleting, "the claim is being deleted"},
		{"resizing", claim(corev1.ClaimBound, func(p *corev1.PersistentVolumeClaim) {
			p.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue}}
		}), nil, nil, status.Provisioning, "expanding the volume"},
		{"file system resize pending", claim(corev1.ClaimBound, func(p *corev1.PersistentVolumeClaim) {
			p.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue}}
		}), nil, nil, status.Provisioning, "expanding the file system (waits for a pod to mount the volume)"},
		{"expansion requested", claim(corev1.ClaimBound, func(p *corev1.PersistentVolumeClaim) {
			p.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		}), nil, nil, status.Provisioning, "expansion to 2Gi requested"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, msg := status.Of(tt.pvc, tt.class, tt.warnings)
			if got != tt.want || msg != tt.message {
				t.Fatalf("Of = %s %q, want %s %q", got, msg, tt.want, tt.message)
			}
		})
	}
}
