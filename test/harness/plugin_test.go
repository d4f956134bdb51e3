package harness

import (
	"context"
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshots "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/test/poll"
)

// pluginClasses are each local cluster's plugin class and its snapshot
// class, from environments/local-*.yaml.
var pluginClasses = map[string]struct{ class, snapshotClass string }{
	"local-east": {"snapshots", "snapshots"},
	"local-west": {"csi-hostpath", "csi-hostpath-snapclass"},
}

// TestPluginSnapshotsRestoresAndClones drives each cluster's CSI plugin
// through the real sidecars: a claim is provisioned by the
// external-provisioner, snapshotted by the snapshot controller and the
// csi-snapshotter, restored from the snapshot and cloned, and the
// snapshot's deletion removes its content.
func TestPluginSnapshotsRestoresAndClones(t *testing.T) {
	for _, c := range clusters {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			names := pluginClasses[c.Name()]
			ctx := t.Context()
			ns := c.Spec.Environment.Namespace
			snaps := snapshotClient(t, c).SnapshotV1()

			source := waitForBound(t, c, create(t, c, newClaim("source", names.class, corev1.ReadWriteOnce, nil, "1Gi")))
			snap, err := snaps.VolumeSnapshots(ns).Create(ctx, &snapshotv1.VolumeSnapshot{
				ObjectMeta: metav1.ObjectMeta{Name: "snap-" + rand.String(5)},
				Spec: snapshotv1.VolumeSnapshotSpec{
					Source:                  snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &source.Name},
					VolumeSnapshotClassName: &names.snapshotClass,
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = snaps.VolumeSnapshots(ns).Delete(context.Background(), snap.Name, metav1.DeleteOptions{}) })
			ready := poll.Value(t, time.Minute, func() (*snapshotv1.VolumeSnapshot, bool) {
				got, err := snaps.VolumeSnapshots(ns).Get(ctx, snap.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return got, got.Status != nil && ptr.Deref(got.Status.ReadyToUse, false)
			})
			if size := ready.Status.RestoreSize; size == nil || size.Cmp(resource.MustParse("1Gi")) != 0 {
				t.Fatalf("snapshot restore size %v, want 1Gi", size)
			}
			content := ptr.Deref(ready.Status.BoundVolumeSnapshotContentName, "")
			if content == "" {
				t.Fatal("ready snapshot names no content")
			}

			restore := newClaim("restore", names.class, corev1.ReadWriteOnce, nil, "1Gi")
			restore.Spec.DataSourceRef = &corev1.TypedObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: snap.Name}
			restored := waitForBound(t, c, create(t, c, restore))
			clone := newClaim("clone", names.class, corev1.ReadWriteOnce, nil, "1Gi")
			clone.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: source.Name}
			cloned := waitForBound(t, c, create(t, c, clone))
			for _, pvc := range []*corev1.PersistentVolumeClaim{restored, cloned} {
				if msg := waitForEvent(t, c, pvc, "ProvisioningSucceeded"); !strings.Contains(msg, pvc.Spec.VolumeName) {
					t.Errorf("%s: ProvisioningSucceeded %q does not name its volume %s", pvc.Name, msg, pvc.Spec.VolumeName)
				}
			}

			if err := snaps.VolumeSnapshots(ns).Delete(ctx, snap.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, time.Minute, "the snapshot's content deleted with it", func() bool {
				_, err := snaps.VolumeSnapshotContents().Get(ctx, content, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
		})
	}
}

// TestPluginRefusesWhatItCannot: the plugin's refusals reach the claim as
// the external-provisioner reports them.
func TestPluginRefusesWhatItCannot(t *testing.T) {
	east := cluster(t, "local-east")
	class := pluginClasses[east.Name()].class
	t.Run("an access mode it lacks", func(t *testing.T) {
		t.Parallel()
		pvc := create(t, east, newClaim("plugin-rwx", class, corev1.ReadWriteMany, nil, "1Gi"))
		if msg := waitForEvent(t, east, pvc, "ProvisioningFailed"); !strings.Contains(msg, "InvalidArgument") || !strings.Contains(msg, "access mode") {
			t.Fatalf("ProvisioningFailed %q does not refuse the access mode", msg)
		}
	})
	t.Run("a snapshot that does not exist", func(t *testing.T) {
		t.Parallel()
		pvc := newClaim("plugin-no-snapshot", class, corev1.ReadWriteOnce, nil, "1Gi")
		pvc.Spec.DataSourceRef = &corev1.TypedObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: "missing"}
		got := create(t, east, pvc)
		if msg := waitForEvent(t, east, got, "ProvisioningFailed"); !strings.Contains(msg, `"missing" not found`) {
			t.Fatalf("ProvisioningFailed %q does not say the snapshot is missing", msg)
		}
		if phase := getClaim(t, east, got).Status.Phase; phase != corev1.ClaimPending {
			t.Fatalf("claim from a missing snapshot is %s, want Pending", phase)
		}
	})
}

func snapshotClient(t *testing.T, c *Cluster) *snapshots.Clientset {
	t.Helper()
	cs, err := snapshots.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestPluginChangesTiersAndGrows: the external-resizer changes a plugin
// volume's tier (its VolumeAttributesClass) and grows it through the
// plugin; a tier the plugin refuses leaves the volume on its tier with
// the modification infeasible and the refusal in an event.
func TestPluginChangesTiersAndGrows(t *testing.T) {
	east := cluster(t, "local-east")
	claims := east.AdminClient().CoreV1().PersistentVolumeClaims(east.Spec.Environment.Namespace)
	pvc := newClaim("tiered", pluginClasses[east.Name()].class, corev1.ReadWriteOnce, nil, "1Gi")
	pvc.Spec.VolumeAttributesClassName = ptr.To("silver")
	pvc = waitForBound(t, east, create(t, east, pvc))
	onTier := func(tier string) {
		t.Helper()
		poll.Value(t, time.Minute, func() (*corev1.PersistentVolumeClaim, bool) {
			got := getClaim(t, east, pvc)
			return got, ptr.Deref(got.Status.CurrentVolumeAttributesClassName, "") == tier && got.Status.ModifyVolumeStatus == nil
		})
	}
	onTier("silver")
	patch := func(body string) {
		t.Helper()
		if _, err := claims.Patch(t.Context(), pvc.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	patch(`{"spec":{"volumeAttributesClassName":"gold"}}`)
	onTier("gold")

	patch(`{"spec":{"volumeAttributesClassName":"platinum"}}`)
	refused := poll.Value(t, time.Minute, func() (*corev1.PersistentVolumeClaim, bool) {
		got := getClaim(t, east, pvc)
		s := got.Status.ModifyVolumeStatus
		return got, s != nil && s.Status == corev1.PersistentVolumeClaimModifyVolumeInfeasible
	})
	if tier := ptr.Deref(refused.Status.CurrentVolumeAttributesClassName, ""); tier != "gold" {
		t.Fatalf("after a refused tier the volume is on %q, want gold", tier)
	}
	if msg := waitForEvent(t, east, refused, "VolumeModifyFailed"); !strings.Contains(msg, `tier "platinum" is not one`) {
		t.Fatalf("VolumeModifyFailed %q does not give the plugin's reason", msg)
	}

	// Back to the tier it is on, and grown. (This resizer keeps the refused
	// modification's status after the revert: it names platinum, which the
	// claim no longer asks for.)
	patch(`{"spec":{"volumeAttributesClassName":"gold","resources":{"requests":{"storage":"2Gi"}}}}`)
	poll.Until(t, time.Minute, "the claim grown to 2Gi on tier gold", func() bool {
		got := getClaim(t, east, pvc)
		size := got.Status.Capacity[corev1.ResourceStorage]
		return size.Cmp(resource.MustParse("2Gi")) == 0 && ptr.Deref(got.Status.CurrentVolumeAttributesClassName, "") == "gold"
	})
	waitForEvent(t, east, pvc, "VolumeResizeSuccessful")
	var resizedBy []string
	for _, e := range claimEvents(t, east, pvc) {
		if e.Reason == "VolumeResizeSuccessful" {
			resizedBy = append(resizedBy, e.Source.Component)
		}
	}
	if want := "external-resizer " + provisionerOf(t, east, *pvc.Spec.StorageClassName); len(resizedBy) != 1 || resizedBy[0] != want {
		t.Fatalf("the claim was grown by %v, want %q", resizedBy, want)
	}
}
