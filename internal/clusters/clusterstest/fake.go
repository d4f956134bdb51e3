// Package clusterstest stands in for one environment's live cluster
// (clusters.Live) in tests of the decisions taken on what its caches
// answer — a volume's spec resolved against its classes, a claim's status,
// whether a claim is gone. Objects live in client-go's fake clientset: a
// write through Client is read back at once, as from a cache that is never
// behind. Behaviour against a real API server (informers, watches, errors,
// timing) is tested with the harness's clusters, never with this.
package clusterstest

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	snapshotv1client "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/typed/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/clusters"
)

// Fake is a live cluster holding the objects it was made with, READY and
// synced until SetHealth says otherwise.
type Fake struct {
	health    atomic.Pointer[clusters.Health]
	clientset *fake.Clientset
	snapshots *snapshotfake.Clientset
	requested atomic.Int64
}

var _ clusters.Live = (*Fake)(nil)

// New returns a Fake holding objects (claims, classes, events, namespaces,
// VolumeSnapshots and their classes).
func New(objects ...runtime.Object) *Fake {
	var core, snapshots []runtime.Object
	for _, obj := range objects {
		switch obj.(type) {
		case *snapshotv1.VolumeSnapshot, *snapshotv1.VolumeSnapshotClass:
			snapshots = append(snapshots, obj)
		default:
			core = append(core, obj)
		}
	}
	// The snapshot client module generates no apply configurations, so
	// it has no NewClientset.
	f := &Fake{clientset: fake.NewClientset(core...), snapshots: snapshotfake.NewSimpleClientset(snapshots...)} //nolint:staticcheck // see above
	f.SetHealth(clusters.Health{State: clusters.HealthReady, Synced: true})
	return f
}

// SetHealth sets what Health answers from now on.
func (f *Fake) SetHealth(h clusters.Health) { f.health.Store(&h) }

// Health returns what SetHealth set last.
func (f *Fake) Health() clusters.Health { return *f.health.Load() }

// PVC returns a DCM-managed claim.
func (f *Fake) PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool) {
	pvc, err := f.clientset.CoreV1().PersistentVolumeClaims(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || pvc.Labels[clusters.ManagedByLabel] != clusters.ManagedByValue {
		return nil, false
	}
	return pvc, true
}

// PVCs returns every DCM-managed claim, by namespace and name.
func (f *Fake) PVCs() []*corev1.PersistentVolumeClaim {
	list, _ := f.clientset.CoreV1().PersistentVolumeClaims("").List(context.Background(),
		metav1.ListOptions{LabelSelector: clusters.ManagedByLabel + "=" + clusters.ManagedByValue})
	out := make([]*corev1.PersistentVolumeClaim, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	slices.SortFunc(out, func(a, b *corev1.PersistentVolumeClaim) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// StorageClass returns a class.
func (f *Fake) StorageClass(name string) (*storagev1.StorageClass, bool) {
	class, err := f.clientset.StorageV1().StorageClasses().Get(context.Background(), name, metav1.GetOptions{})
	return class, err == nil
}

// ClassOf returns the class a claim names; one it names that does not
// exist is gone (the fake's class cache is always synced).
func (f *Fake) ClassOf(pvc *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, bool) {
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return nil, false
	}
	class, ok := f.StorageClass(*pvc.Spec.StorageClassName)
	return class, !ok
}

// DefaultStorageClass returns the class Kubernetes gives a claim without one.
func (f *Fake) DefaultStorageClass() (*storagev1.StorageClass, bool) {
	list, _ := f.clientset.StorageV1().StorageClasses().List(context.Background(), metav1.ListOptions{})
	classes := make([]*storagev1.StorageClass, 0, len(list.Items))
	for i := range list.Items {
		classes = append(classes, &list.Items[i])
	}
	found := capabilities.DefaultClass(classes)
	return found, found != nil
}

// WarningEvents returns the Warning events about the named claim, newest
// first.
func (f *Fake) WarningEvents(namespace, pvcName string) []*corev1.Event {
	list, _ := f.clientset.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{})
	var out []*corev1.Event
	for i := range list.Items {
		e := &list.Items[i]
		if e.Type == corev1.EventTypeWarning && e.InvolvedObject.Kind == "PersistentVolumeClaim" && e.InvolvedObject.Name == pvcName {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Event) int { return b.LastTimestamp.Compare(a.LastTimestamp.Time) })
	return out
}

// FollowSnapshots does nothing: the fake's snapshots are always read.
func (f *Fake) FollowSnapshots() {}

// Snapshot returns a VolumeSnapshot the gateway made (its cache is never
// behind).
func (f *Fake) Snapshot(namespace, name string) (*snapshotv1.VolumeSnapshot, bool, bool) {
	snap, err := f.snapshots.SnapshotV1().VolumeSnapshots(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || snap.Labels[clusters.ManagedByLabel] != clusters.ManagedByValue {
		return nil, false, true
	}
	return snap, true, true
}

// SnapshotClient writes the fake's snapshots.
func (f *Fake) SnapshotClient() snapshotv1client.SnapshotV1Interface { return f.snapshots.SnapshotV1() }

// StorageSynced reports true: the fake's caches are its objects.
func (f *Fake) StorageSynced() bool { return true }

// StorageObjects returns the classes, CSI drivers, capacities and
// snapshot classes it holds, by name (no quotas).
func (f *Fake) StorageObjects() capabilities.Objects {
	ctx := context.Background()
	var objs capabilities.Objects
	if list, err := f.clientset.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range list.Items {
			objs.Classes = append(objs.Classes, &list.Items[i])
		}
	}
	if list, err := f.clientset.StorageV1().CSIDrivers().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range list.Items {
			objs.Drivers = append(objs.Drivers, &list.Items[i])
		}
	}
	if list, err := f.clientset.StorageV1().CSIStorageCapacities("").List(ctx, metav1.ListOptions{}); err == nil {
		for i := range list.Items {
			objs.Capacities = append(objs.Capacities, &list.Items[i])
		}
	}
	if list, err := f.snapshots.SnapshotV1().VolumeSnapshotClasses().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range list.Items {
			objs.SnapshotClasses = append(objs.SnapshotClasses, &list.Items[i])
		}
	}
	slices.SortFunc(objs.Classes, func(a, b *storagev1.StorageClass) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(objs.Drivers, func(a, b *storagev1.CSIDriver) int { return cmp.Compare(a.Name, b.Name) })
	return objs
}

// StorageRequested counts the calls (Requested).
func (f *Fake) StorageRequested() { f.requested.Add(1) }

// Requested is how often StorageRequested was called.
func (f *Fake) Requested() int64 { return f.requested.Load() }

// Client is the fake clientset.
func (f *Fake) Client() corev1client.CoreV1Interface { return f.clientset.CoreV1() }
