package repo

import (
	"os"
	"path/filepath"
	"testing"
)

// The root is found from any directory of the checkout, past the go.mod of
// a nested module (the tools'), and nowhere outside a checkout.
func TestRootIsTheCheckoutsFromAnywhereInIt(t *testing.T) {
	root := Root()
	if _, err := os.Stat(filepath.Join(root, "environments")); err != nil || !isRoot(root) {
		t.Fatalf("Root() = %s, which is not the checkout's root: %v", root, err)
	}
	t.Chdir(filepath.Join(root, "test", "tools", "gotestsum"))
	if got := Root(); got != root {
		t.Fatalf("from a nested module: Root() = %s, want %s", got, root)
	}
	t.Chdir(t.TempDir())
	defer func() {
		if recover() == nil {
			t.Fatal("Root() outside a checkout did not panic")
		}
	}()
	_ = Root()
}
