package volumes

import (
	"fmt"
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
// gateway's informers see it and DCM's instance id can be found from it,
// and with the owner that makes it.
func newPVC(id string, s Spec, o owner) *corev1.PersistentVolumeClaim {
	labels := maps.Clone(s.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[clusters.ManagedByLabel] = clusters.ManagedByValue
	labels[InstanceIDLabel] = id
	labels[ServiceTypeLabel] = ServiceType
	labels[InstallationLabel] = o.installation
	labels[EnvironmentLabel] = o.environment
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

// createdByGateway reports whether a gateway created pvc: its claims
// keep the display name in an annotation, which DCM's per-cluster storage
// provider (whose claims carry the same labels) never sets.
func createdByGateway(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Annotations[displayNameAnnotation] != ""
}

// Ownership labels: every claim the gateway makes names the installation
// (its database's identity, see installationID) and the environment that
// made it, so an admin can select one environment's claims, and no
// environment takes another's claim for its own on a name match.
const (
	InstallationLabel = "storage-gateway.dcm.project/installation"
	EnvironmentLabel  = "storage-gateway.dcm.project/environment"
)

// owner is one environment of one installation: who a claim belongs to.
type owner struct{ installation, environment string }

// holder is whose a claim is, as one environment sees it.
type holder int

const (
	// heldHere: the environment's own claim — labelled for it, or
	// (claims made before claims named their owner, and adopted ones) the
	// claim its record holds by uid.
	heldHere holder = iota
	// heldElsewhere: labelled for another environment or installation.
	heldElsewhere
	// heldUnlabelled: made by a gateway before claims named their owner,
	// and no record of this environment holds it.
	heldUnlabelled
	// heldByProvider: labelled for DCM by its per-cluster storage
	// provider (no display name annotation), no record holds it.
	heldByProvider
	// heldByNobody: not a claim DCM's labels give to this volume id (made
	// by hand, or for another DCM service).
	heldByNobody
)

// holderOf says whose pvc, a claim named like volume id, is for o, whose
// record of the volume holds the claim of uid recordedUID (empty when it
// holds none yet). The owner labels decide wherever a claim has them;
// only an unlabelled claim is told by its uid.
func (o owner) holderOf(pvc *corev1.PersistentVolumeClaim, id, recordedUID string) holder {
	inst, env := pvc.Labels[InstallationLabel], pvc.Labels[EnvironmentLabel]
	switch {
	case !managedAs(pvc, id):
		return heldByNobody
	case inst != "" || env != "":
		if inst == o.installation && env == o.environment {
			return heldHere
		}
		return heldElsewhere
	case recordedUID != "" && recordedUID == string(pvc.UID):
		return heldHere
	case createdByGateway(pvc):
		return heldUnlabelled
	}
	return heldByProvider
}

// labelledElsewhere reports whether pvc names an owner other than o: a
// claim another environment (or installation) serves, which o neither
// counts as unadopted nor adopts unless told to take it over.
func (o owner) labelledElsewhere(pvc *corev1.PersistentVolumeClaim) bool {
	inst, env := pvc.Labels[InstallationLabel], pvc.Labels[EnvironmentLabel]
	return (inst != "" || env != "") && (inst != o.installation || env != o.environment)
}

// unserved reports whether pvc is a claim for DCM storage that o could
// serve once adopted: not one labelled for another environment or
// installation, which serves it. Counted as unadopted until adopted.
func (o owner) unserved(pvc *corev1.PersistentVolumeClaim) bool {
	return storageClaim(pvc) && !o.labelledElsewhere(pvc)
}

// heldBy describes who holds pvc (labelled elsewhere, or unlabelled), for
// a refusal: another environment of this installation by name, another
// installation by its id.
func (o owner) heldBy(pvc *corev1.PersistentVolumeClaim) string {
	inst, env := pvc.Labels[InstallationLabel], pvc.Labels[EnvironmentLabel]
	switch {
	case inst == "" && env == "":
		return "a storage-gateway environment that made it before claims named their owner"
	case inst == o.installation:
		return fmt.Sprintf("environment %q of this gateway", env)
	}
	return fmt.Sprintf("environment %q of another storage-gateway installation (%s)", env, inst)
}

// specDifferences names the fields in which a claim differs from the spec
// a create asks for — storage class, access and volume modes, capacity —
// for a create meeting a claim of its own it did not make: a replay only
// when they agree.
func specDifferences(pvc *corev1.PersistentVolumeClaim, want Spec) []string {
	have := specOf(pvc)
	const hints = "spec.provider_hints.kubernetes."
	var diff []string
	if q, err := resource.ParseQuantity(want.Capacity); err != nil || pvc.Spec.Resources.Requests.Storage().Cmp(q) != 0 {
		diff = append(diff, "spec.capacity")
	}
	for _, f := range []struct{ name, want, have string }{
		{"storage_class", want.StorageClass, have.StorageClass},
		{"access_mode", want.AccessMode, have.AccessMode},
		{"volume_mode", want.VolumeMode, have.VolumeMode},
	} {
		if f.want != f.have {
			diff = append(diff, hints+f.name)
		}
	}
	return diff
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
		if !slices.Contains(ReservedLabels, k) && !slices.Contains(ownerLabels, k) {
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
