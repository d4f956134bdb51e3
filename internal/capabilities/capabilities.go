package capabilities

import (
	"slices"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
)

// StorageClass annotations that state a class's modes explicitly; they take
// precedence over anything the gateway could infer.
const (
	AccessModesAnnotation = "storage-gateway.dcm.project/access-modes"
	VolumeModesAnnotation = "storage-gateway.dcm.project/volume-modes"
)

// Source says where a capability came from.
type Source string

// Sources, strongest first.
const (
	SourceAnnotation  Source = "annotation"
	SourceEnvironment Source = "environment"
	SourceDriver      Source = "driver"
	SourceUnknown     Source = "unknown"
)

// Modes is a set of supported modes and its source; nil Supported means
// unknown.
type Modes struct {
	Supported []string
	Source    Source
}

// Allows reports whether mode is supported; an unknown capability allows
// everything, since the gateway must never reject what it cannot know.
func (m Modes) Allows(mode string) bool {
	return m.Supported == nil || slices.Contains(m.Supported, mode)
}

// Overrides are an environment admin's statement of what the environment's
// classes support, for drivers the built-in table does not know or knows
// differently (say a backend configured read-only). A class entry beats a
// provisioner entry; a StorageClass annotation beats both, since it travels
// with the class itself.
type Overrides struct {
	StorageClasses map[string]Override `json:"storage_classes,omitempty"`
	Provisioners   map[string]Override `json:"provisioners,omitempty"`
}

// Override lists supported modes; an empty list leaves that kind of mode to
// the next source.
type Override struct {
	AccessModes []string `json:"access_modes,omitempty"`
	VolumeModes []string `json:"volume_modes,omitempty"`
}

func (o Overrides) lookup(class *storagev1.StorageClass, pick func(Override) []string) ([]string, bool) {
	if modes := pick(o.StorageClasses[class.Name]); len(modes) > 0 {
		return modes, true
	}
	modes := pick(o.Provisioners[class.Provisioner])
	return modes, len(modes) > 0
}

// AccessModes returns the class's supported access modes: its annotation
// if set, else the environment's overrides, else the built-in table of
// well-known provisioners, else unknown.
func AccessModes(class *storagev1.StorageClass, overrides Overrides) Modes {
	return resolve(class, overrides, AccessModesAnnotation, AllAccessModes,
		func(o Override) []string { return o.AccessModes }, func(d driverModes) []string { return d.access })
}

// VolumeModes returns the class's supported volume modes, with the same
// precedence as AccessModes.
func VolumeModes(class *storagev1.StorageClass, overrides Overrides) Modes {
	return resolve(class, overrides, VolumeModesAnnotation, AllVolumeModes,
		func(o Override) []string { return o.VolumeModes }, func(d driverModes) []string { return d.volume })
}

func resolve(class *storagev1.StorageClass, overrides Overrides, annotation string, all []string,
	fromOverride func(Override) []string, fromTable func(driverModes) []string) Modes {
	if m, ok := fromAnnotation(class, annotation, all); ok {
		return m
	}
	if modes, ok := overrides.lookup(class, fromOverride); ok {
		return Modes{Supported: slices.Clone(modes), Source: SourceEnvironment}
	}
	if d, ok := fromDriver(class.Provisioner, class.Parameters); ok {
		return Modes{Supported: slices.Clone(fromTable(d)), Source: SourceDriver}
	}
	return Modes{Source: SourceUnknown}
}

// fromAnnotation reads a comma-separated list of modes. Entries that are not
// modes Kubernetes defines are ignored (a typo must not make the gateway
// refuse everything, nor reach the API), and an annotation without a valid
// entry counts as absent.
func fromAnnotation(class *storagev1.StorageClass, key string, all []string) (Modes, bool) {
	var modes []string
	for _, m := range strings.Split(class.Annotations[key], ",") {
		if m = strings.TrimSpace(m); slices.Contains(all, m) && !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	if modes == nil {
		return Modes{}, false
	}
	return Modes{Supported: modes, Source: SourceAnnotation}, true
}
