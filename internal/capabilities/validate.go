package capabilities

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dcm-project/storage-gateway/internal/fault"
)

// maxOverrides bounds each map of Overrides, so one environment row stays
// small.
const maxOverrides = 256

// AllAccessModes and AllVolumeModes are every mode Kubernetes defines;
// RequestAccessModes are the access modes a volume request (DCM's
// StorageSpec) may ask for.
var (
	AllAccessModes     = []string{rwo, rox, rwx, rwop}
	AllVolumeModes     = []string{fs, blk}
	RequestAccessModes = []string{rwo, rox, rwx}
)

// Validate reports the first invalid entry, naming it under field (the
// overrides' own name in the request). Messages never repeat the value.
func (o Overrides) Validate(field string) error {
	for _, group := range []struct {
		name    string
		entries map[string]Override
		valid   func(string) []string
		rule    string
	}{
		{"storage_classes", o.StorageClasses, validation.IsDNS1123Subdomain, "StorageClass names (DNS-1123 subdomains)"},
		{"provisioners", o.Provisioners, validation.IsQualifiedName, "provisioner names (a CSI driver name or a [prefix/]name)"},
	} {
		path := field + "." + group.name
		if len(group.entries) > maxOverrides {
			return fault.Invalid(path, "at most %d entries are allowed", maxOverrides)
		}
		for key, override := range group.entries {
			if len(group.valid(key)) > 0 {
				return fault.Invalid(path, "keys must be %s", group.rule)
			}
			if err := override.validate(path + "." + key); err != nil {
				return err
			}
		}
	}
	return nil
}

func (o Override) validate(path string) error {
	if len(o.AccessModes) == 0 && len(o.VolumeModes) == 0 {
		return fault.Invalid(path, "must list access_modes, volume_modes or both (use null to remove the entry)")
	}
	if err := modeList(path+".access_modes", o.AccessModes, AllAccessModes); err != nil {
		return err
	}
	return modeList(path+".volume_modes", o.VolumeModes, AllVolumeModes)
}

func modeList(path string, modes, valid []string) error {
	for i, m := range modes {
		if !slices.Contains(valid, m) {
			return fault.Invalid(path, "every entry must be one of %v", valid)
		}
		if slices.Contains(modes[:i], m) {
			return fault.Invalid(path, "must not repeat a mode")
		}
	}
	return nil
}
