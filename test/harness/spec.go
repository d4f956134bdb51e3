package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/dcm-project/storage-gateway/test/repo"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Spec describes one harness cluster: the environment the gateway registers
// for it and what the harness builds inside it. Specs live in the repository's
// environments/ directory (local-east.yaml, local-west.yaml).
type Spec struct {
	Environment Environment `json:"environment"`
	Cluster     ClusterSpec `json:"cluster"`
}

// Environment mirrors the gateway's environment registration fields that a
// cluster file can preset.
type Environment struct {
	ID                string            `json:"id"`
	DisplayName       string            `json:"display_name,omitempty"`
	Description       string            `json:"description,omitempty"`
	Region            string            `json:"region,omitempty"`
	Zone              string            `json:"zone,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Namespace         string            `json:"namespace"`
	AllowedNamespaces []string          `json:"allowed_namespaces,omitempty"`
}

// Namespaces returns the default namespace followed by the allowed ones.
func (e Environment) Namespaces() []string {
	return append([]string{e.Namespace}, e.AllowedNamespaces...)
}

// ClusterSpec is what the harness creates in the cluster.
type ClusterSpec struct {
	// Drivers are the storage drivers the harness provisioner emulates.
	Drivers []Driver `json:"drivers"`
	// Objects are Kubernetes objects applied at start.
	Objects []unstructured.Unstructured `json:"objects,omitempty"`
}

// Driver is one storage driver. Like a real CSI driver, it refuses to
// provision access or volume modes it does not support.
type Driver struct {
	Name        string                              `json:"name"`
	AccessModes []corev1.PersistentVolumeAccessMode `json:"access_modes"`
	VolumeModes []corev1.PersistentVolumeMode       `json:"volume_modes"`
	// Plugin makes the driver a CSI plugin (csiplugin.go) behind the
	// Kubernetes CSI project's own sidecars — external-provisioner,
	// csi-snapshotter and the snapshot controller (sidecars.go) — which
	// snapshots, restores and clones; otherwise the harness emulates the
	// driver (provisioner.go, resizer.go; run by drivers.go).
	Plugin bool `json:"plugin,omitempty"`
	// Tiers are the values of the plugin's one mutable parameter
	// (TierParameter) it accepts, from VolumeAttributesClasses.
	Tiers []string `json:"tiers,omitempty"`
}

func (d Driver) supportsAccessMode(m corev1.PersistentVolumeAccessMode) bool {
	return slices.Contains(d.AccessModes, m)
}

func (d Driver) supportsVolumeMode(m corev1.PersistentVolumeMode) bool {
	return slices.Contains(d.VolumeModes, m)
}

// LoadSpec reads a cluster file.
func LoadSpec(path string) (Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, err
	}
	var s Spec
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := s.validate(); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func (s Spec) validate() error {
	if s.Environment.ID == "" || s.Environment.Namespace == "" {
		return fmt.Errorf("environment.id and environment.namespace are required")
	}
	if len(s.Cluster.Drivers) == 0 {
		return fmt.Errorf("cluster.drivers: at least one driver is required")
	}
	for _, d := range s.Cluster.Drivers {
		if len(d.Tiers) > 0 && !d.Plugin {
			return fmt.Errorf("cluster.drivers: %s: tiers need plugin: true", d.Name)
		}
	}
	return nil
}

// LocalSpecs loads every environments/local-*.yaml file of the repository,
// sorted by file name.
func LocalSpecs() ([]Spec, error) {
	paths, err := filepath.Glob(filepath.Join(repo.Root(), "environments", "local-*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	specs := make([]Spec, 0, len(paths))
	for _, p := range paths {
		s, err := LoadSpec(p)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("no environments/local-*.yaml files in %s", repo.Root())
	}
	return specs, nil
}
