package snapshots

import (
	"strings"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/clusters/clusterstest"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

func TestObserveReadsTheVolumeSnapshotsState(t *testing.T) {
	size := resource.MustParse("1Gi")
	for _, tt := range []struct {
		name   string
		status *snapshotv1.VolumeSnapshotStatus
		del    bool
		want   observation
	}{
		{"no status yet", nil, false, observation{Status: Pending, Message: "waiting for the snapshot controller"}},
		{"content bound, not ready", &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To("c")}, false,
			observation{Status: Pending, Message: "the driver is cutting the snapshot"}},
		{"ready with its size", &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true), RestoreSize: &size}, false,
			observation{Status: Ready, Message: "ready to restore", RestoreSize: "1Gi"}},
		{"ready wins over an error not cleared yet", &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true),
			Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("timeout")}}, false, observation{Status: Ready, Message: "ready to restore"}},
		{"an error, its text made safe", &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false),
			Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("driver says\nno")}}, false, observation{Status: Failed, Message: "driver says no"}},
		{"an error without text", &snapshotv1.VolumeSnapshotStatus{Error: &snapshotv1.VolumeSnapshotError{}}, false,
			observation{Status: Failed, Message: "the snapshot failed"}},
		{"being deleted", &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}, true,
			observation{Status: Deleting, Message: "the snapshot is being deleted"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vs := &snapshotv1.VolumeSnapshot{Status: tt.status}
			if tt.del {
				vs.DeletionTimestamp = &metav1.Time{}
			}
			if got := observe(vs); got != tt.want {
				t.Fatalf("observe = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestSnapshotClassIsCheckedBeforeAnythingIsWritten: the class a request
// names, or the default the snapshot controller would pick, decided on
// the cluster's objects as the snapshot controller decides it.
func TestSnapshotClassIsCheckedBeforeAnythingIsWritten(t *testing.T) {
	const ns, driver = "dcm", "snap.csi.example"
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: driver}
	snapClass := func(name, driver string, isDefault bool) *snapshotv1.VolumeSnapshotClass {
		c := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: driver}
		if isDefault {
			c.Annotations = map[string]string{capabilities.DefaultSnapshotClassAnnotation: "true"}
		}
		return c
	}
	claim := func(phase corev1.PersistentVolumeClaimPhase) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "v1", Namespace: ns, Labels: map[string]string{clusters.ManagedByLabel: clusters.ManagedByValue}},
			Spec:       corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("fast")},
			Status:     corev1.PersistentVolumeClaimStatus{Phase: phase},
		}
	}
	vol := volumes.Volume{ID: "v1", Spec: volumes.Spec{Namespace: ns, StorageClass: "fast"}}
	bound := claim(corev1.ClaimBound)
	for _, tt := range []struct {
		name      string
		objects   []runtime.Object
		requested string
		want      string
		kind      fault.Kind
		mention   string
	}{
		{"the driver's one default", []runtime.Object{bound, snapClass("a", driver, false), snapClass("b", driver, true)}, "", "b", 0, ""},
		{"a class named", []runtime.Object{bound, snapClass("a", driver, false), snapClass("b", driver, true)}, "a", "a", 0, ""},
		{"no default", []runtime.Object{bound, snapClass("a", driver, false)}, "", "", fault.FailedPrecondition, "no default VolumeSnapshotClass; name one of: a"},
		{"several defaults", []runtime.Object{bound, snapClass("a", driver, true), snapClass("b", driver, true)}, "", "", fault.FailedPrecondition, "several default VolumeSnapshotClasses (a, b)"},
		{"another driver's class", []runtime.Object{bound, snapClass("a", driver, false), snapClass("x", "other", true)}, "x", "", fault.FailedPrecondition, "x is for driver other"},
		{"a class that does not exist", []runtime.Object{bound, snapClass("a", driver, false)}, "nope", "", fault.FailedPrecondition, "does not exist in the cluster (one created just now is seen within seconds); name one of: a"},
		{"a driver without classes", []runtime.Object{bound, snapClass("x", "other", true)}, "", "", fault.FailedPrecondition, "cannot be snapshotted"},
		{"a claim not bound yet", []runtime.Object{claim(corev1.ClaimPending), snapClass("b", driver, true)}, "", "", fault.Conflict, "not bound"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cluster := clusterstest.New(append([]runtime.Object{class}, tt.objects...)...)
			got, err := snapshotClass(cluster, vol, Request{SnapshotClass: tt.requested})
			if tt.kind == 0 {
				if err != nil || got != tt.want {
					t.Fatalf("snapshotClass = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			f, ok := fault.As(err)
			if !ok || f.Kind != tt.kind || !strings.Contains(f.Detail, tt.mention) {
				t.Fatalf("snapshotClass = %q, %v; want a %v mentioning %q", got, err, tt.kind, tt.mention)
			}
			if tt.kind == fault.FailedPrecondition && f.Field != "snapshot_class" {
				t.Fatalf("refusal names field %q, want snapshot_class", f.Field)
			}
		})
	}
}
