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
	SourceAnnotation Source = "annotation"
	SourceDriver     Source = "driver"
	SourceUnknown    Source = "unknown"
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

// AccessModes returns the class's supported access modes: its annotation
// if set, else the built-in table of well-known provisioners, else unknown.
func AccessModes(class *storagev1.StorageClass) Modes {
	return resolve(class, AccessModesAnnotation, func(d driverModes) []string { return d.access })
}

// VolumeModes returns the class's supported volume modes, with the same
// precedence as AccessModes.
func VolumeModes(class *storagev1.StorageClass) Modes {
	return resolve(class, VolumeModesAnnotation, func(d driverModes) []string { return d.volume })
}

func resolve(class *storagev1.StorageClass, annotation string, pick func(driverModes) []string) Modes {
	if m, ok := fromAnnotation(class, annotation); ok {
		return m
	}
	if d, ok := fromDriver(class.Provisioner, class.Parameters); ok {
		return Modes{Supported: pick(d), Source: SourceDriver}
	}
	return Modes{Source: SourceUnknown}
}

func fromAnnotation(class *storagev1.StorageClass, key string) (Modes, bool) {
	raw, ok := class.Annotations[key]
	if !ok {
		return Modes{}, false
	}
	var modes []string
	for _, m := range strings.Split(raw, ",") {
		if m = strings.TrimSpace(m); m != "" {
			modes = append(modes, m)
		}
	}
	return Modes{Supported: modes, Source: SourceAnnotation}, true
}
