package cli

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// TestManifestTakesShortAccessModes: a manifest may write access modes as
// the tables print them; they are sent by their Kubernetes names, and an
// unknown one is left for the gateway to refuse by name.
func TestManifestTakesShortAccessModes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "east.yaml")
	manifest := `environment:
  id: east
  namespace: dcm
  defaults: {access_mode: rwx}
  capability_overrides:
    provisioners: {disk.csi.example.com: {access_modes: [RWO, RWOP]}}
    storage_classes: {shared: {access_modes: [ROX, ReadWriteMany, Sideways]}}
`
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	id, in, err := readManifest(path, "")
	if err != nil || id != "east" {
		t.Fatalf("readManifest = %q, %v", id, err)
	}
	if *in.Defaults.AccessMode != api.AccessModeReadWriteMany {
		t.Errorf("defaults.access_mode = %s", *in.Defaults.AccessMode)
	}
	want := map[string][]api.KubernetesAccessMode{
		"disk.csi.example.com": {api.KubernetesAccessModeReadWriteOnce, api.KubernetesAccessModeReadWriteOncePod},
		"shared":               {api.KubernetesAccessModeReadOnlyMany, api.KubernetesAccessModeReadWriteMany, "Sideways"},
	}
	got := map[string][]api.KubernetesAccessMode{
		"disk.csi.example.com": *(*in.CapabilityOverrides.Provisioners)["disk.csi.example.com"].AccessModes,
		"shared":               *(*in.CapabilityOverrides.StorageClasses)["shared"].AccessModes,
	}
	for name, modes := range want {
		if !slices.Equal(got[name], modes) {
			t.Errorf("%s: %v, want %v", name, got[name], modes)
		}
	}
}
