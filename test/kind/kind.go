// Package kind describes the kind clusters `make kind-up` creates on laptops
// with a container engine (environments/kind/*.yaml): each file pairs the
// environment the gateway registers with a kind v1alpha4 cluster config. The
// e2e suite on machines without containers uses the harness instead.
package kind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/dcm-project/storage-gateway/test/harness"
)

// Spec is one environments/kind/*.yaml file.
type Spec struct {
	Environment harness.Environment `json:"environment"`
	// Config is the kind cluster configuration (kind: Cluster).
	Config v1alpha4.Cluster `json:"kind_config"`
}

// ClusterName is the kind cluster's name: the config's, else the environment id.
func (s Spec) ClusterName() string {
	if s.Config.Name != "" {
		return s.Config.Name
	}
	return s.Environment.ID
}

// LoadSpecs reads every *.yaml file in dir, sorted by name.
func LoadSpecs(dir string) ([]Spec, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no kind cluster files in %s", dir)
	}
	sort.Strings(paths)
	specs := make([]Spec, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var s Spec
		if err := yaml.UnmarshalStrict(data, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		specs = append(specs, s)
	}
	return specs, nil
}

func (s Spec) validate() error {
	if s.Environment.ID == "" || s.Environment.Namespace == "" {
		return errors.New("environment.id and environment.namespace are required")
	}
	if s.Config.Kind != "Cluster" || s.Config.APIVersion != "kind.x-k8s.io/v1alpha4" {
		return errors.New("kind_config must be a kind.x-k8s.io/v1alpha4 Cluster")
	}
	return nil
}
