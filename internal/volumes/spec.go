package volumes

import (
	"maps"
	"math"
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
)

// Labels every gateway PVC carries (DCM's, the same its per-cluster
// storage provider sets).
const (
	InstanceIDLabel  = "dcm.project/dcm-instance-id"
	ServiceTypeLabel = "dcm.project/dcm-service-type"
	ServiceType      = "storage"
	// displayNameAnnotation keeps spec.metadata.name, which is not the id.
	displayNameAnnotation = "dcm.project/display-name"
)

// ReservedLabels are the label keys the gateway sets on every claim (and
// DCM's per-cluster storage provider on its own): a user may not set them;
// any other key, under dcm.project/ too, is the user's.
var ReservedLabels = []string{clusters.ManagedByLabel, InstanceIDLabel, ServiceTypeLabel}

// ownerLabels are the gateway's own label keys on its claims (see owner):
// a user setting one could pass a claim off as another environment's.
var ownerLabels = []string{InstallationLabel, EnvironmentLabel}

// CapacityPattern is how DCM's storage contract writes a capacity: digits,
// an optional fraction and an optional unit; without one it is bytes.
// DCM's contract also lists a decimal K, which no Kubernetes quantity
// spells (its kilo is k), so the gateway's does not. The API contract
// declares the same pattern (a test keeps them equal).
const CapacityPattern = `^[0-9]+(\.[0-9]+)?(Ei|Pi|Ti|Gi|Mi|Ki|E|P|T|G|M)?$`

// CapacityRule says in words what a capacity must be, for every refusal
// of one (the API's pattern check included).
const CapacityRule = "must be a size: digits, an optional fraction and an optional unit " +
	"(Ki, Mi, Gi, Ti, Pi, Ei, or M, G, T, P, E), e.g. 10Gi, 500M or 1073741824 (bytes)"

var capacityPattern = regexp.MustCompile(CapacityPattern)

// Request is a create request as DCM sent it: hints may be empty.
type Request struct {
	Name     string
	Labels   map[string]string
	Capacity string
	Hints    Hints
}

// Hints are the request's provider_hints.kubernetes.
type Hints struct {
	StorageClass string `json:"storage_class,omitempty"`
	AccessMode   string `json:"access_mode,omitempty"`
	VolumeMode   string `json:"volume_mode,omitempty"`
	Namespace    string `json:"namespace,omitempty"`
	// Source, when set, fills the new volume from a snapshot or another
	// volume (not part of DCM's contract).
	Source *Source `json:"source,omitempty"`
}

// Source is what a new volume is filled from: a snapshot of the
// environment (a restore) or one of its volumes (a clone); exactly one.
type Source struct {
	Snapshot string `json:"snapshot,omitempty"`
	Volume   string `json:"volume,omitempty"`
}

// Spec is what a volume was created with once defaults and the storage class
// were resolved; it is stored with the volume record.
type Spec struct {
	Name         string            `json:"name"`
	Labels       map[string]string `json:"labels"`
	Capacity     string            `json:"capacity"`
	StorageClass string            `json:"storage_class"`
	AccessMode   string            `json:"access_mode"`
	VolumeMode   string            `json:"volume_mode"`
	Namespace    string            `json:"namespace"`
	Source       *Source           `json:"source,omitempty"`
}

// ValidateID checks a volume id: it becomes a PVC name, and "health" is the
// provider's health path.
func ValidateID(id string) error {
	if len(validation.IsDNS1123Label(id)) > 0 || id == "health" {
		return fault.Invalid("id", `must be 1-63 lowercase letters, digits or '-' (a UUID fits), and not "health"`)
	}
	return nil
}

// ParseCapacity checks a requested size: written as CapacityPattern says, a
// Kubernetes quantity, greater than zero and less than 8Ei — a claim's size
// is a 64-bit count of bytes, and Kubernetes silently clamps a larger
// binary quantity to 2^63-1 rather than refusing it.
func ParseCapacity(field, s string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil || !capacityPattern.MatchString(s) {
		return resource.Quantity{}, fault.Invalid(field, CapacityRule)
	}
	if q.Sign() <= 0 {
		return resource.Quantity{}, fault.Invalid(field, "must be greater than zero")
	}
	if q.CmpInt64(math.MaxInt64) >= 0 {
		return resource.Quantity{}, fault.Invalid(field, "must be less than 8Ei (%s is larger than any volume can be)", s)
	}
	return q, nil
}

// canonicalCapacity writes a valid capacity as Kubernetes writes it back
// (1.5Gi as 1536Mi), so the record, the claim, every answer and every
// event show one form.
func canonicalCapacity(s string) string {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return s
	}
	return q.String()
}

// validate checks everything that needs no cluster.
func (r Request) validate() error {
	if len(validation.IsDNS1123Label(r.Name)) > 0 {
		return fault.Invalid("spec.metadata.name", "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit")
	}
	if _, err := ParseCapacity("spec.capacity", r.Capacity); err != nil {
		return err
	}
	for k, v := range r.Labels {
		if slices.Contains(ReservedLabels, k) || slices.Contains(ownerLabels, k) {
			return fault.Invalid("spec.metadata.labels", "%q is reserved: the gateway sets it on every claim", k)
		}
		if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			return fault.Invalid("spec.metadata.labels", "must be Kubernetes labels (keys [prefix/]name, values at most 63 characters)")
		}
	}
	h := r.Hints
	const hints = "spec.provider_hints.kubernetes."
	switch {
	case h.StorageClass != "" && len(validation.IsDNS1123Subdomain(h.StorageClass)) > 0:
		return fault.Invalid(hints+"storage_class", "must be a StorageClass name")
	case h.AccessMode != "" && !slices.Contains(capabilities.RequestAccessModes, h.AccessMode):
		return fault.Invalid(hints+"access_mode", "must be one of ReadWriteOnce, ReadOnlyMany, ReadWriteMany")
	case h.VolumeMode != "" && !slices.Contains(capabilities.AllVolumeModes, h.VolumeMode):
		return fault.Invalid(hints+"volume_mode", "must be Filesystem or Block")
	case h.Namespace != "" && len(validation.IsDNS1123Label(h.Namespace)) > 0:
		return fault.Invalid(hints+"namespace", "must be a namespace name")
	case h.Source != nil && (h.Source.Snapshot == "") == (h.Source.Volume == ""):
		return fault.Invalid(hints+"source", "must name either a snapshot or a volume")
	case h.Source != nil && h.Source.Snapshot != "" && len(validation.IsDNS1123Label(h.Source.Snapshot)) > 0:
		return fault.Invalid(hints+"source.snapshot", "must be a snapshot id")
	case h.Source != nil && h.Source.Volume != "" && len(validation.IsDNS1123Label(h.Source.Volume)) > 0:
		return fault.Invalid(hints+"source.volume", "must be a volume id")
	}
	return nil
}

// differences names the fields in which a repeated request differs from the
// spec the volume was created with. Hints the request leaves open match
// whatever was resolved then.
func (r Request) differences(s Spec) []string {
	var diff []string
	if r.Name != s.Name {
		diff = append(diff, "spec.metadata.name")
	}
	if !maps.Equal(r.Labels, s.Labels) && (len(r.Labels) > 0 || len(s.Labels) > 0) {
		diff = append(diff, "spec.metadata.labels")
	}
	want, _ := resource.ParseQuantity(r.Capacity)
	have, _ := resource.ParseQuantity(s.Capacity)
	if want.Cmp(have) != 0 {
		diff = append(diff, "spec.capacity")
	}
	const hints = "spec.provider_hints.kubernetes."
	for _, f := range []struct{ name, want, have string }{
		{"storage_class", r.Hints.StorageClass, s.StorageClass},
		{"access_mode", r.Hints.AccessMode, s.AccessMode},
		{"volume_mode", r.Hints.VolumeMode, s.VolumeMode},
		{"namespace", r.Hints.Namespace, s.Namespace},
	} {
		if f.want != "" && f.want != f.have {
			diff = append(diff, hints+f.name)
		}
	}
	if ptr.Deref(r.Hints.Source, Source{}) != ptr.Deref(s.Source, Source{}) {
		diff = append(diff, hints+"source")
	}
	return diff
}
