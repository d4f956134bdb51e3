package volumes

import (
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// Volume is one volume as DCM sees it.
type Volume struct {
	ID            string
	EnvironmentID string
	Spec          Spec
	// VolumeName is the bound PersistentVolume, once there is one.
	VolumeName string
	Status     status.Status
	Message    string
	CreateTime time.Time
	UpdateTime time.Time
	// Tier is the claim's performance tier, once one is asked for.
	Tier *Tier
}

// newPVC is the claim for a volume: named by the volume id, labelled so the
// gateway's informers see it and DCM's instance id can be found from it.
func newPVC(id string, s Spec) *corev1.PersistentVolumeClaim {
	labels := maps.Clone(s.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[clusters.ManagedByLabel] = clusters.ManagedByValue
	labels[InstanceIDLabel] = id
	labels[ServiceTypeLabel] = ServiceType
	mode := corev1.PersistentVolumeMode(s.VolumeMode)
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        id,
			Namespace:   s.Namespace,
			Labels:      labels,
			Annotations: map[string]string{displayNameAnnotation: s.Name},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.PersistentVolumeAccessMode(s.AccessMode)},
			VolumeMode:       &mode,
			StorageClassName: &s.StorageClass,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(s.Capacity)},
			},
			DataSourceRef: dataSource(s.Source),
		},
	}
}

// snapshotGroup is the API group of VolumeSnapshots.
const snapshotGroup = "snapshot.storage.k8s.io"

// dataSource is the claim's reference to what fills it: a VolumeSnapshot
// of its namespace (restored by the CSI driver) or a claim (cloned).
func dataSource(src *Source) *corev1.TypedObjectReference {
	switch {
	case src == nil:
		return nil
	case src.Snapshot != "":
		return &corev1.TypedObjectReference{APIGroup: ptr.To(snapshotGroup), Kind: "VolumeSnapshot", Name: src.Snapshot}
	}
	return &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: src.Volume}
}

// sourceOf reads back what a claim was filled from.
func sourceOf(ref *corev1.TypedObjectReference) *Source {
	switch {
	case ref == nil:
		return nil
	case ref.Kind == "VolumeSnapshot" && ptr.Deref(ref.APIGroup, "") == snapshotGroup:
		return &Source{Snapshot: ref.Name}
	case ref.Kind == "PersistentVolumeClaim" && ptr.Deref(ref.APIGroup, "") == "":
		return &Source{Volume: ref.Name}
	}
	return nil
}

// storageClaim reports whether pvc is DCM's claim for a storage volume (the
// gateway's, or another provider's of the same contract).
func storageClaim(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Labels[ServiceTypeLabel] == ServiceType
}

// managedAs reports whether pvc is the gateway's claim for volume id.
func managedAs(pvc *corev1.PersistentVolumeClaim, id string) bool {
	return pvc.Labels[clusters.ManagedByLabel] == clusters.ManagedByValue && pvc.Labels[InstanceIDLabel] == id
}

// createdByGateway reports whether the gateway created pvc: its claims
// keep the display name in an annotation, which DCM's per-cluster storage
// provider (whose claims carry the same labels) never sets.
func createdByGateway(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Annotations[displayNameAnnotation] != ""
}

// specOf rebuilds a volume's spec from its claim, so what DCM reads is what
// the cluster has (a capacity being expanded shows the requested size). An
// adopted claim has no display name annotation: its provider named it by
// DCM's spec.metadata.name, which is its name.
func specOf(pvc *corev1.PersistentVolumeClaim) Spec {
	s := Spec{
		Name:      first(pvc.Annotations[displayNameAnnotation], pvc.Name),
		Namespace: pvc.Namespace,
		Labels:    map[string]string{},
	}
	for k, v := range pvc.Labels {
		if !slices.Contains(ReservedLabels, k) {
			s.Labels[k] = v
		}
	}
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		s.Capacity = q.String()
	}
	if pvc.Spec.StorageClassName != nil {
		s.StorageClass = *pvc.Spec.StorageClassName
	}
	if len(pvc.Spec.AccessModes) > 0 {
		s.AccessMode = string(pvc.Spec.AccessModes[0])
	}
	s.VolumeMode = string(corev1.PersistentVolumeFilesystem)
	if pvc.Spec.VolumeMode != nil {
		s.VolumeMode = string(*pvc.Spec.VolumeMode)
	}
	s.Source = sourceOf(pvc.Spec.DataSourceRef)
	return s
}
