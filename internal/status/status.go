package status

import (
	"fmt"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Status is a volume's state in DCM's vocabulary.
type Status string

// The statuses DCM knows a volume by (the API contract's VolumeStatus).
const (
	Provisioning Status = "PROVISIONING"
	Running      Status = "RUNNING"
	Failed       Status = "FAILED"
	Deleting     Status = "DELETING"
	Deleted      Status = "DELETED"
)

// warningPrefix starts the message of a volume whose provisioning reported
// a warning.
const warningPrefix = "provisioning: "

// selectedNodeAnnotation is set by the scheduler once a pod using a
// WaitForFirstConsumer claim has been placed.
const selectedNodeAnnotation = "volume.kubernetes.io/selected-node"

// Of maps a PVC to a status and message. class may be nil when unknown;
// warnings are the claim's Warning events, newest first.
func Of(pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, warnings []*corev1.Event) (Status, string) {
	switch {
	case pvc.DeletionTimestamp != nil:
		return Deleting, "the claim is being deleted"
	case pvc.Status.Phase == corev1.ClaimLost:
		return Failed, "the claim lost its volume " + pvc.Spec.VolumeName
	case pvc.Status.Phase == corev1.ClaimBound:
		return bound(pvc)
	}
	return pending(pvc, class, warnings)
}

func bound(pvc *corev1.PersistentVolumeClaim) (Status, string) {
	for _, c := range pvc.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case corev1.PersistentVolumeClaimResizing:
			return Provisioning, "expanding the volume"
		case corev1.PersistentVolumeClaimFileSystemResizePending:
			return Provisioning, "expanding the file system (waits for a pod to mount the volume)"
		}
	}
	requested, actual := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pvc.Status.Capacity[corev1.ResourceStorage]
	if !actual.IsZero() && requested.Cmp(actual) > 0 {
		return Provisioning, fmt.Sprintf("expansion to %s requested", requested.String())
	}
	return Running, "bound to volume " + pvc.Spec.VolumeName
}

func pending(pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, warnings []*corev1.Event) (Status, string) {
	if len(warnings) > 0 {
		return Provisioning, warningPrefix + Clean(warnings[0].Reason+": "+warnings[0].Message)
	}
	if class != nil && class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer &&
		pvc.Annotations[selectedNodeAnnotation] == "" {
		return Provisioning, "waiting for first consumer"
	}
	return Provisioning, "waiting for the provisioner"
}

// maxEventText bounds how much of an event, which anyone allowed to create
// events in the namespace can write, reaches DCM.
const maxEventText = 256

// Clean makes text others wrote (an event, a driver's error) safe to
// show: printable characters only, bounded.
func Clean(s string) string {
	out := strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, s)
	if r := []rune(out); len(r) > maxEventText {
		out = string(r[:maxEventText-1]) + "…"
	}
	return out
}
