package environments

import (
	"slices"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/fault"
)

// Limits that keep one row and one probe bounded.
const (
	maxDisplayName       = 256
	maxDescription       = 2048
	maxLabels            = 64
	maxAllowedNamespaces = 32
)

// ValidateID checks an environment id.
func ValidateID(id string) error {
	if len(validation.IsDNS1123Label(id)) > 0 { // the AEP-122 id syntax of the contract
		return fault.Invalid("id", "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit")
	}
	return nil
}

// DefaultProviderName is the DCM provider name used when none is set.
func DefaultProviderName(id string) string { return "storage-gateway-" + id }

// normalize fills defaults and puts set-like fields in a canonical order, so
// two equivalent specs compare equal.
func (s *Spec) normalize(id string) {
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	var extra []string
	for _, ns := range s.AllowedNamespaces {
		if ns != s.Namespace && !slices.Contains(extra, ns) {
			extra = append(extra, ns)
		}
	}
	slices.Sort(extra)
	s.AllowedNamespaces = extra
	if s.AllowedNamespaces == nil {
		s.AllowedNamespaces = []string{}
	}
	if s.DCM.ProviderName == "" {
		s.DCM.ProviderName = DefaultProviderName(id)
	}
}

// validate reports the first invalid field. Messages describe the rule and
// never repeat the submitted value.
func (s Spec) validate() error {
	checks := []func() error{
		func() error { return maxLen("display_name", s.DisplayName, maxDisplayName) },
		func() error { return maxLen("description", s.Description, maxDescription) },
		s.validateLabels,
		func() error { return labelValue("region", s.Region) },
		func() error { return labelValue("zone", s.Zone) },
		s.validateNamespaces,
		s.Defaults.validate,
		func() error { return providerName(s.DCM.ProviderName) },
		func() error { return s.CapabilityOverrides.Validate("capability_overrides") },
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func maxLen(field, v string, n int) error {
	if !utf8.ValidString(v) {
		return fault.Invalid(field, "must be valid UTF-8")
	}
	if utf8.RuneCountInString(v) > n {
		return fault.Invalid(field, "must be at most %d characters", n)
	}
	return nil
}

func labelValue(field, v string) error {
	if len(validation.IsValidLabelValue(v)) > 0 {
		return fault.Invalid(field, "must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
	}
	return nil
}

func (s Spec) validateLabels() error {
	if len(s.Labels) > maxLabels {
		return fault.Invalid("labels", "at most %d labels are allowed", maxLabels)
	}
	for k, v := range s.Labels {
		if len(validation.IsQualifiedName(k)) > 0 {
			return fault.Invalid("labels", "keys must be Kubernetes label keys ([prefix/]name, name at most 63 characters)")
		}
		if len(validation.IsValidLabelValue(v)) > 0 {
			return fault.Invalid("labels", "values must be Kubernetes label values (at most 63 letters, digits, '-', '_' or '.')")
		}
	}
	return nil
}

func (s Spec) validateNamespaces() error {
	if s.Namespace == "" {
		return fault.Invalid("namespace", "is required (or select a kubeconfig context that names one)")
	}
	if len(validation.IsDNS1123Label(s.Namespace)) > 0 {
		return fault.Invalid("namespace", "must be a Kubernetes namespace name (DNS-1123 label)")
	}
	if len(s.AllowedNamespaces) > maxAllowedNamespaces {
		return fault.Invalid("allowed_namespaces", "at most %d namespaces are allowed", maxAllowedNamespaces)
	}
	for _, ns := range s.AllowedNamespaces {
		if len(validation.IsDNS1123Label(ns)) > 0 {
			return fault.Invalid("allowed_namespaces", "every entry must be a Kubernetes namespace name (DNS-1123 label)")
		}
	}
	return nil
}

func (d Defaults) validate() error {
	if d.StorageClass != "" && len(validation.IsDNS1123Subdomain(d.StorageClass)) > 0 {
		return fault.Invalid("defaults.storage_class", "must be a StorageClass name (DNS-1123 subdomain)")
	}
	if d.AccessMode != "" && !slices.Contains(capabilities.RequestAccessModes, d.AccessMode) {
		return fault.Invalid("defaults.access_mode", "must be one of ReadWriteOnce, ReadOnlyMany, ReadWriteMany")
	}
	if d.VolumeMode != "" && !slices.Contains(capabilities.AllVolumeModes, d.VolumeMode) {
		return fault.Invalid("defaults.volume_mode", "must be Filesystem or Block")
	}
	return nil
}

func providerName(name string) error {
	if len(validation.IsDNS1123Label(name)) > 0 {
		return fault.Invalid("dcm.provider_name", "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit")
	}
	return nil
}
