package capabilities

import (
	"cmp"
	"slices"
	"strings"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Objects are the storage objects of one cluster the fleet view is built
// from, as its informers cache them.
type Objects struct {
	Classes    []*storagev1.StorageClass       `json:"classes"`
	Drivers    []*storagev1.CSIDriver          `json:"drivers"`
	Capacities []*storagev1.CSIStorageCapacity `json:"capacities"`
	// Quotas are the ResourceQuotas of the environment's default
	// namespace; QuotasDenied says the gateway may not read them.
	Quotas       []*corev1.ResourceQuota `json:"quotas,omitempty"`
	QuotasDenied bool                    `json:"quotas_denied,omitempty"`
	// SnapshotClasses are the cluster's VolumeSnapshotClasses (none where
	// it does not serve the snapshot API); SnapshotClassesDenied says the
	// gateway may not read them.
	SnapshotClasses       []*snapshotv1.VolumeSnapshotClass `json:"snapshot_classes,omitempty"`
	SnapshotClassesDenied bool                              `json:"snapshot_classes_denied,omitempty"`
	// Tiers are the cluster's VolumeAttributesClasses; TiersDenied says
	// the gateway may not read them.
	Tiers       []*storagev1.VolumeAttributesClass `json:"tiers,omitempty"`
	TiersDenied bool                               `json:"tiers_denied,omitempty"`
}

// Class is what one environment offers under one StorageClass name: the
// class's settings, its capabilities and where they come from, the facts of
// its CSI driver and the capacity the driver publishes. JSON names are the
// API's (StorageClassDetail).
type Class struct {
	Name                 string            `json:"name"`
	Provisioner          string            `json:"provisioner"`
	IsDefault            bool              `json:"is_default"`
	VolumeBindingMode    string            `json:"volume_binding_mode"`
	AllowVolumeExpansion bool              `json:"allow_volume_expansion"`
	ReclaimPolicy        string            `json:"reclaim_policy"`
	Parameters           map[string]string `json:"parameters"`
	// AccessModes and VolumeModes are nil when unknown.
	AccessModes      []string         `json:"access_modes,omitempty"`
	VolumeModes      []string         `json:"volume_modes,omitempty"`
	CapabilitySource CapabilitySource `json:"capability_source"`
	CSIDriver        *DriverFacts     `json:"csi_driver,omitempty"`
	Capacity         *Capacity        `json:"capacity,omitempty"`
	// Snapshots says whether the class's volumes can be snapshotted: yes
	// (a VolumeSnapshotClass is for its driver; SnapshotClasses names
	// them, the default first), no, or unknown (the gateway may not read
	// snapshot classes).
	Snapshots       Support  `json:"snapshots"`
	SnapshotClasses []string `json:"snapshot_classes,omitempty"`
	// Tiers are the VolumeAttributesClasses of the class's driver, the
	// performance tiers its volumes can be given, by name: empty when
	// there are none, nil when unknown (the gateway may not read them).
	Tiers []string `json:"tiers"`
	// CloneClasses are the environment's classes a volume of this class
	// can be cloned into, by name, itself among them: a clone is made by
	// its source's CSI driver, so those of the same provisioner. None for
	// Kubernetes' in-tree provisioners (kubernetes.io/…), which do not
	// clone.
	CloneClasses []string `json:"clone_classes,omitempty"`
}

// Support says whether a class offers a feature.
type Support string

// The answers Support gives.
const (
	Supported   Support = "yes"
	Unsupported Support = "no"
	Unknown     Support = "unknown"
)

// DefaultSnapshotClassAnnotation marks a driver's default
// VolumeSnapshotClass.
const DefaultSnapshotClassAnnotation = "snapshot.storage.kubernetes.io/is-default-class"

// CapabilitySource says where each kind of mode came from.
type CapabilitySource struct {
	AccessModes Source `json:"access_modes"`
	VolumeModes Source `json:"volume_modes"`
}

// DriverFacts are what a CSIDriver object declares about its driver.
type DriverFacts struct {
	AttachRequired       *bool    `json:"attach_required,omitempty"`
	StorageCapacity      *bool    `json:"storage_capacity,omitempty"`
	PodInfoOnMount       *bool    `json:"pod_info_on_mount,omitempty"`
	VolumeLifecycleModes []string `json:"volume_lifecycle_modes,omitempty"`
	FSGroupPolicy        string   `json:"fs_group_policy,omitempty"`
}

// Capacity is the sum of a class's CSIStorageCapacity objects, overall and
// per topology segment (the nodes a capacity is reachable from).
type Capacity struct {
	Total      string    `json:"total"`
	TotalBytes int64     `json:"total_bytes"`
	Segments   []Segment `json:"segments"`
}

// Segment is the capacity reachable from one node topology.
type Segment struct {
	// Topology is the node selector, in label-selector syntax; empty when a
	// capacity object names none.
	Topology          string `json:"topology"`
	Capacity          string `json:"capacity"`
	CapacityBytes     int64  `json:"capacity_bytes"`
	MaximumVolumeSize string `json:"maximum_volume_size,omitempty"`
}

// Describe builds the classes of one environment, by name. It only reads
// objs; the result shares nothing with the driver table, and only the
// CSIDriver facts' flags with objs (which nobody modifies).
func Describe(objs Objects, overrides Overrides) []Class {
	drivers := make(map[string]*storagev1.CSIDriver, len(objs.Drivers))
	for _, d := range objs.Drivers {
		drivers[d.Name] = d
	}
	capacities := map[string][]*storagev1.CSIStorageCapacity{}
	for _, c := range objs.Capacities {
		capacities[c.StorageClassName] = append(capacities[c.StorageClassName], c)
	}
	def := DefaultClass(objs.Classes)
	out := make([]Class, 0, len(objs.Classes))
	for _, sc := range objs.Classes {
		access, volume := AccessModes(sc, overrides), VolumeModes(sc, overrides)
		c := Class{
			Name:                 sc.Name,
			Provisioner:          sc.Provisioner,
			IsDefault:            sc == def,
			VolumeBindingMode:    string(ptr.Deref(sc.VolumeBindingMode, storagev1.VolumeBindingImmediate)),
			AllowVolumeExpansion: ptr.Deref(sc.AllowVolumeExpansion, false),
			ReclaimPolicy:        string(ptr.Deref(sc.ReclaimPolicy, "Delete")),
			Parameters:           PublicParameters(sc.Parameters),
			AccessModes:          access.Supported,
			VolumeModes:          volume.Supported,
			CapabilitySource:     CapabilitySource{AccessModes: access.Source, VolumeModes: volume.Source},
			Capacity:             sumCapacity(capacities[sc.Name]),
		}
		if d, ok := drivers[sc.Provisioner]; ok {
			c.CSIDriver = driverFacts(d)
		}
		c.Snapshots, c.SnapshotClasses = SnapshotSupport(objs, sc.Provisioner)
		if !objs.TiersDenied {
			c.Tiers = []string{}
			for _, t := range objs.Tiers {
				if t.DriverName == sc.Provisioner {
					c.Tiers = append(c.Tiers, t.Name)
				}
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Class) int { return cmp.Compare(a.Name, b.Name) })
	for i := range out {
		if strings.HasPrefix(out[i].Provisioner, "kubernetes.io/") {
			continue
		}
		for _, other := range out {
			if other.Provisioner == out[i].Provisioner {
				out[i].CloneClasses = append(out[i].CloneClasses, other.Name)
			}
		}
	}
	return out
}

// SnapshotSupport says whether driver's volumes can be snapshotted, and
// through which VolumeSnapshotClasses (its default first, then by name).
func SnapshotSupport(objs Objects, driver string) (Support, []string) {
	if objs.SnapshotClassesDenied {
		return Unknown, nil
	}
	var classes []*snapshotv1.VolumeSnapshotClass
	for _, c := range objs.SnapshotClasses {
		if c.Driver == driver {
			classes = append(classes, c)
		}
	}
	if len(classes) == 0 {
		return Unsupported, nil
	}
	rank := func(c *snapshotv1.VolumeSnapshotClass) int { // the default first
		if c.Annotations[DefaultSnapshotClassAnnotation] == "true" {
			return 0
		}
		return 1
	}
	slices.SortFunc(classes, func(a, b *snapshotv1.VolumeSnapshotClass) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.Name, b.Name))
	})
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.Name
	}
	return Supported, names
}

func driverFacts(d *storagev1.CSIDriver) *DriverFacts {
	f := &DriverFacts{
		AttachRequired:  d.Spec.AttachRequired,
		StorageCapacity: d.Spec.StorageCapacity,
		PodInfoOnMount:  d.Spec.PodInfoOnMount,
	}
	for _, m := range d.Spec.VolumeLifecycleModes {
		f.VolumeLifecycleModes = append(f.VolumeLifecycleModes, string(m))
	}
	if d.Spec.FSGroupPolicy != nil {
		f.FSGroupPolicy = string(*d.Spec.FSGroupPolicy)
	}
	return f
}

// sumCapacity adds up published capacities; nil when none is published.
func sumCapacity(objs []*storagev1.CSIStorageCapacity) *Capacity {
	type sums struct{ total, largest resource.Quantity }
	var total resource.Quantity
	bySegment := map[string]*sums{}
	for _, o := range objs {
		if o.Capacity == nil {
			continue
		}
		topology := ""
		if o.NodeTopology != nil {
			topology = metav1.FormatLabelSelector(o.NodeTopology)
		}
		s := bySegment[topology]
		if s == nil {
			s = &sums{}
			bySegment[topology] = s
		}
		s.total.Add(*o.Capacity)
		total.Add(*o.Capacity)
		if o.MaximumVolumeSize != nil && o.MaximumVolumeSize.Cmp(s.largest) > 0 {
			s.largest = *o.MaximumVolumeSize
		}
	}
	if len(bySegment) == 0 {
		return nil
	}
	c := &Capacity{Total: total.String(), TotalBytes: total.Value()}
	for topology, s := range bySegment {
		seg := Segment{Topology: topology, Capacity: s.total.String(), CapacityBytes: s.total.Value()}
		if !s.largest.IsZero() {
			seg.MaximumVolumeSize = s.largest.String()
		}
		c.Segments = append(c.Segments, seg)
	}
	slices.SortFunc(c.Segments, func(a, b Segment) int { return cmp.Compare(a.Topology, b.Topology) })
	return c
}

// secretMarkers are substrings of parameter keys whose values may name or
// hold credentials: the CSI convention csi.storage.k8s.io/*-secret-name, and
// what in-tree and third-party provisioners use (GlusterFS restuserkey,
// apiKey, passphrase, auth...). The list errs on the side of hiding: a
// hidden harmless parameter costs a dashboard little, a shown secret a lot.
var secretMarkers = []string{"secret", "pass", "token", "credential", "key", "auth", "private", "cert"}

// PublicParameters returns the parameters without secret-looking keys; never
// nil, so the API always shows an object.
func PublicParameters(params map[string]string) map[string]string {
	out := make(map[string]string, len(params))
	for k, v := range params {
		lower := strings.ToLower(k)
		if !slices.ContainsFunc(secretMarkers, func(m string) bool { return strings.Contains(lower, m) }) {
			out[k] = v
		}
	}
	return out
}

// Annotations that mark a StorageClass as the cluster default, as Kubernetes
// reads them (the beta one is still honoured).
var defaultClassAnnotations = []string{
	"storageclass.kubernetes.io/is-default-class",
	"storageclass.beta.kubernetes.io/is-default-class",
}

// DefaultClass returns the class Kubernetes gives a PVC without one: among
// those annotated as default, the newest (then the first by name); nil when
// there is none.
func DefaultClass(classes []*storagev1.StorageClass) *storagev1.StorageClass {
	var found *storagev1.StorageClass
	for _, class := range classes {
		if !slices.ContainsFunc(defaultClassAnnotations, func(a string) bool { return class.Annotations[a] == "true" }) {
			continue
		}
		if found == nil || class.CreationTimestamp.After(found.CreationTimestamp.Time) ||
			class.CreationTimestamp.Equal(&found.CreationTimestamp) && class.Name < found.Name {
			found = class
		}
	}
	return found
}

// Slim copies the parts of objs that Describe reads, without secret-looking
// parameters: what the fleet index keeps in memory and persists.
func Slim(objs Objects) Objects {
	out := Objects{
		Classes:    make([]*storagev1.StorageClass, 0, len(objs.Classes)),
		Drivers:    make([]*storagev1.CSIDriver, 0, len(objs.Drivers)),
		Capacities: make([]*storagev1.CSIStorageCapacity, 0, len(objs.Capacities)),
	}
	for _, c := range objs.Classes {
		annotations := map[string]string{}
		for _, k := range append([]string{AccessModesAnnotation, VolumeModesAnnotation}, defaultClassAnnotations...) {
			if v, ok := c.Annotations[k]; ok {
				annotations[k] = v
			}
		}
		out.Classes = append(out.Classes, &storagev1.StorageClass{
			ObjectMeta:  metav1.ObjectMeta{Name: c.Name, Annotations: annotations, CreationTimestamp: c.CreationTimestamp},
			Provisioner: c.Provisioner, Parameters: PublicParameters(c.Parameters), ReclaimPolicy: c.ReclaimPolicy,
			AllowVolumeExpansion: c.AllowVolumeExpansion, VolumeBindingMode: c.VolumeBindingMode,
		})
	}
	for _, d := range objs.Drivers {
		out.Drivers = append(out.Drivers, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d.Name}, Spec: *d.Spec.DeepCopy()})
	}
	for _, c := range objs.Capacities {
		out.Capacities = append(out.Capacities, &storagev1.CSIStorageCapacity{
			ObjectMeta:       metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace},
			StorageClassName: c.StorageClassName, Capacity: c.Capacity, MaximumVolumeSize: c.MaximumVolumeSize,
			NodeTopology: c.NodeTopology,
		})
	}
	out.QuotasDenied = objs.QuotasDenied
	for _, q := range objs.Quotas {
		hard, used := storageResources(q.Status.Hard), storageResources(q.Status.Used)
		if len(hard) == 0 {
			continue // limits something else
		}
		out.Quotas = append(out.Quotas, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: q.Name, Namespace: q.Namespace},
			Status:     corev1.ResourceQuotaStatus{Hard: hard, Used: used},
		})
	}
	out.SnapshotClassesDenied, out.TiersDenied = objs.SnapshotClassesDenied, objs.TiersDenied
	for _, c := range objs.SnapshotClasses {
		var annotations map[string]string
		if v, ok := c.Annotations[DefaultSnapshotClassAnnotation]; ok {
			annotations = map[string]string{DefaultSnapshotClassAnnotation: v}
		}
		out.SnapshotClasses = append(out.SnapshotClasses, &snapshotv1.VolumeSnapshotClass{
			ObjectMeta: metav1.ObjectMeta{Name: c.Name, Annotations: annotations}, Driver: c.Driver, DeletionPolicy: c.DeletionPolicy})
	}
	for _, t := range objs.Tiers {
		out.Tiers = append(out.Tiers, &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: t.Name}, DriverName: t.DriverName})
	}
	return out
}
