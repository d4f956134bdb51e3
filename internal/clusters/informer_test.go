package clusters

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// handled records what a handler was told, one line per call.
type handled struct{ calls []string }

func (h *handled) OnAdd(obj any, initial bool) {
	h.calls = append(h.calls, fmt.Sprintf("add %s initial=%v", revision(obj), initial))
}

func (h *handled) OnUpdate(old, obj any) {
	h.calls = append(h.calls, fmt.Sprintf("update %s -> %s", revision(old), revision(obj)))
}

func (h *handled) OnDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		h.calls = append(h.calls, fmt.Sprintf("delete %s (tombstone %s)", revision(tomb.Obj), tomb.Key))
		return
	}
	h.calls = append(h.calls, "delete "+revision(obj))
}

func (h *handled) take() []string {
	calls := h.calls
	h.calls = nil
	return calls
}

func revision(obj any) string {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	return pvc.Name + "@" + pvc.ResourceVersion
}

func pvcAt(name, resourceVersion string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: "dcm", Name: name, ResourceVersion: resourceVersion,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
}

// TestTheApplierHandsOnWhatADeltaFIFOWould: the reflector's store tells
// the handler what client-go's controller would have — the first list as
// adds in the initial list, watch events as adds, updates and deletes, and
// a relist as updates of what it still holds and tombstoned deletes of what
// it no longer does — and caches objects without their managed fields.
func TestTheApplierHandsOnWhatADeltaFIFOWould(t *testing.T) {
	h := &handled{}
	a := &applier{indexer: cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, namespaced), handler: h}
	step := func(what string, err error, want ...string) {
		t.Helper()
		if got := h.take(); err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %v (%v), want %v", what, got, err, want)
		}
	}
	if a.synced.Load() {
		t.Fatal("synced before the first list")
	}
	step("first list", a.Replace([]any{pvcAt("a", "1"), pvcAt("b", "1")}, "1"), "add a@1 initial=true", "add b@1 initial=true")
	if !a.synced.Load() {
		t.Fatal("not synced after the first list")
	}
	step("watch add", a.Add(pvcAt("c", "2")), "add c@2 initial=false")
	step("watch update", a.Update(pvcAt("a", "3")), "update a@1 -> a@3")
	step("relist", a.Replace([]any{pvcAt("a", "4"), pvcAt("c", "2")}, "4"),
		"delete b@1 (tombstone dcm/b)", "update a@3 -> a@4", "update c@2 -> c@2")
	step("watch delete", a.Delete(pvcAt("c", "5")), "delete c@5")

	keys := a.indexer.ListKeys()
	if !slices.Equal(keys, []string{"dcm/a"}) {
		t.Errorf("cached %v, want only dcm/a", keys)
	}
	for _, obj := range a.indexer.List() {
		if mf := obj.(*corev1.PersistentVolumeClaim).ManagedFields; mf != nil {
			t.Errorf("cached with managed fields %v", mf)
		}
	}
}
