package clusters

import (
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotv1client "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/typed/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
)

// Live is one environment's live cluster as the parts that serve its
// volumes use it: its health, the caches of its claims, classes and
// warnings and snapshots, and clients for writes. *Cluster is the implementation;
// clusterstest.Fake stands in for it where only these answers matter (the
// decisions taken on them).
type Live interface {
	Health() Health
	// PVC and PVCs read the DCM-managed claims (see Cluster.PVC).
	PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool)
	PVCs() []*corev1.PersistentVolumeClaim
	StorageClass(name string) (*storagev1.StorageClass, bool)
	// ClassOf returns the class a claim names and whether it is known to
	// be gone (see Cluster.ClassOf).
	ClassOf(pvc *corev1.PersistentVolumeClaim) (class *storagev1.StorageClass, gone bool)
	DefaultStorageClass() (*storagev1.StorageClass, bool)
	WarningEvents(namespace, pvcName string) []*corev1.Event
	// StorageRequested says a write changed what the claims request.
	StorageRequested()
	Client() corev1client.CoreV1Interface
	// StorageSynced and StorageObjects are what the fleet view shows:
	// whether the class, driver and capacity caches synced, and their
	// objects (see Cluster.StorageObjects).
	StorageSynced() bool
	StorageObjects() capabilities.Objects
	// FollowSnapshots, Snapshot and SnapshotClient serve the snapshots
	// of the environment's volumes (see Cluster.FollowSnapshots).
	FollowSnapshots()
	Snapshot(namespace, name string) (snap *snapshotv1.VolumeSnapshot, found, synced bool)
	SnapshotClient() snapshotv1client.SnapshotV1Interface
}

var _ Live = (*Cluster)(nil)

// Live returns the environment's live cluster as its volumes use it.
func (p *Pool) Live(environmentID string) (Live, bool) {
	c, ok := p.Get(environmentID)
	if !ok {
		return nil, false // not a typed nil in the interface
	}
	return c, true
}
