package kind

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/test/repo"

	"github.com/dcm-project/storage-gateway/test/harness"
)

func TestRepositoryKindFilesLoad(t *testing.T) {
	specs, err := LoadSpecs(filepath.Join(repo.Root(), "environments", "kind"))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) < 2 {
		t.Fatalf("want at least two kind clusters, got %d", len(specs))
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.ClusterName()] {
			t.Errorf("duplicate kind cluster name %s", s.ClusterName())
		}
		seen[s.ClusterName()] = true
		if len(s.Config.Nodes) == 0 {
			t.Errorf("%s: no nodes", s.ClusterName())
		}
	}
}

func TestInvalidFilesAreRejected(t *testing.T) {
	cases := map[string]string{
		"missing namespace": "environment: {id: x}\nkind_config: {kind: Cluster, apiVersion: kind.x-k8s.io/v1alpha4}\n",
		"wrong kind":        "environment: {id: x, namespace: n}\nkind_config: {kind: Pod, apiVersion: v1}\n",
		"unknown field":     "environment: {id: x, namespace: n}\nkind_config: {kind: Cluster, apiVersion: kind.x-k8s.io/v1alpha4}\nextra: 1\n",
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadSpecs(dir); err == nil || !strings.Contains(err.Error(), "c.yaml") {
				t.Fatalf("err = %v, want a rejection naming the file", err)
			}
		})
	}
}

func TestClusterNameDefaultsToEnvironmentID(t *testing.T) {
	s := Spec{Environment: harness.Environment{ID: "kind-east"}}
	if s.ClusterName() != "kind-east" {
		t.Fatal(s.ClusterName())
	}
	s.Config.Name = "custom"
	if s.ClusterName() != "custom" {
		t.Fatal(s.ClusterName())
	}
}
