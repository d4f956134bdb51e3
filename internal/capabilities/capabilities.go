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

// AccessModes returns what the class says about access modes.
func AccessModes(class *storagev1.StorageClass) Modes {
	return fromAnnotation(class, AccessModesAnnotation)
}

// VolumeModes returns what the class says about volume modes.
func VolumeModes(class *storagev1.StorageClass) Modes {
	return fromAnnotation(class, VolumeModesAnnotation)
}

func fromAnnotation(class *storagev1.StorageClass, key string) Modes {
	raw, ok := class.Annotations[key]
	if !ok {
		return Modes{Source: SourceUnknown}
	}
	var modes []string
	for _, m := range strings.Split(raw, ",") {
		if m = strings.TrimSpace(m); m != "" {
			modes = append(modes, m)
		}
	}
	return Modes{Supported: modes, Source: SourceAnnotation}
}
