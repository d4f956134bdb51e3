package environments

import (
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/fault"
)

// TestOneClusterNamespaceServesOneEnvironment: an environment whose
// namespaces another environment on its cluster serves is refused,
// naming that environment, the namespace and the field, unless it says to
// share them.
func TestOneClusterNamespaceServesOneEnvironment(t *testing.T) {
	others := []neighbour{{ID: "west", Namespaces: []string{"dcm", "team-a"}}, {ID: "lab", Namespaces: []string{"lab"}}}
	for _, tt := range []struct {
		name  string
		spec  Spec
		field string // "": admitted
	}{
		{"other namespaces", Spec{Namespace: "apps", AllowedNamespaces: []string{"batch"}}, ""},
		{"its default namespace taken", Spec{Namespace: "dcm"}, "namespace"},
		{"an allowed namespace taken", Spec{Namespace: "apps", AllowedNamespaces: []string{"team-a"}}, "allowed_namespaces"},
		{"taken, shared on purpose", Spec{Namespace: "dcm", ShareNamespaces: true}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := admitNeighbours(tt.spec)(others)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			fe, ok := fault.As(err)
			if !ok || fe.Kind != fault.Conflict || fe.Field != tt.field || !strings.Contains(fe.Detail, `environment "west"`) ||
				!strings.Contains(fe.Detail, "share_namespaces") {
				t.Fatalf("got %v, want a conflict on %s naming west and share_namespaces", err, tt.field)
			}
		})
	}
	if err := admitNeighbours(Spec{Namespace: "dcm"})(nil); err != nil {
		t.Errorf("the cluster's first environment refused: %v", err)
	}
}
