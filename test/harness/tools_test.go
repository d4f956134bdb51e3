package harness

import (
	"strings"
	"testing"
)

// The sidecars the harness runs are among the programs make test builds
// before the tests, and Tool refuses one that is not, naming the list.
func TestToolsAreListed(t *testing.T) {
	for _, p := range []toolPackage{snapshotController, csiSnapshotter, csiProvisioner, csiResizer} {
		if err := listedTool(p.module, p.pkg); err != nil {
			t.Error(err)
		}
	}
	_, err := Tool(t.Context(), "kubectl", "example.com/unlisted/cmd/tool")
	if err == nil || !strings.Contains(err.Error(), "test/tools/programs") {
		t.Errorf("an unlisted program: %v, want a refusal naming test/tools/programs", err)
	}
}
