package clusterstest_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/clusters/clusterstest"
)

// TestTheFakeAnswersAsTheCachesDo: the fake reads only the claims the
// gateway manages, sees a write through its client at once, refuses a
// second create as an API server does, and tells a class that does not
// exist as gone.
func TestTheFakeAnswersAsTheCachesDo(t *testing.T) {
	unmanaged := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: "dcm"}}
	c := clusterstest.New(unmanaged)
	if _, ok := c.PVC("dcm", "theirs"); ok {
		t.Fatal("a claim without the gateway's label is read as managed")
	}
	class := "fast"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "dcm", Labels: map[string]string{clusters.ManagedByLabel: clusters.ManagedByValue}},
		Spec:       corev1.PersistentVolumeClaimSpec{StorageClassName: &class},
	}
	if _, err := c.Client().PersistentVolumeClaims("dcm").Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.PVC("dcm", "mine"); !ok || got.Name != "mine" || len(c.PVCs()) != 1 {
		t.Fatalf("a claim created through the client reads %v, %v (%d listed)", got, ok, len(c.PVCs()))
	}
	if _, gone := c.ClassOf(pvc); !gone {
		t.Error("a claim naming a class the cluster lacks does not read as gone")
	}
	if _, err := c.Client().PersistentVolumeClaims("dcm").Create(t.Context(), pvc, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("a second create of the claim: %v; want AlreadyExists", err)
	}
}
