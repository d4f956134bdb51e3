package snapshots

import (
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// Status is a snapshot's state.
type Status string

// The states of a snapshot.
const (
	Pending  Status = "PENDING"
	Ready    Status = "READY"
	Failed   Status = "FAILED"
	Deleting Status = "DELETING"
	Deleted  Status = "DELETED"
)

// SourceVolumeLabel names, on a VolumeSnapshot the gateway made, the
// volume it is a snapshot of.
const SourceVolumeLabel = "dcm.project/source-volume"

// Snapshot is one snapshot of a volume.
type Snapshot struct {
	ID            string
	EnvironmentID string
	VolumeID      string
	Namespace     string
	// SnapshotClass is the VolumeSnapshotClass asked for or chosen
	// (empty only where the gateway may not read the classes, which
	// leaves the choice to the snapshot controller).
	SnapshotClass string
	Status        Status
	Message       string
	// RestoreSize is the smallest volume the snapshot restores into,
	// once the driver says (empty before).
	RestoreSize string
	CreateTime  time.Time
	UpdateTime  time.Time
}

// observation is what a VolumeSnapshot shows of its snapshot.
type observation struct {
	Status      Status
	Message     string
	RestoreSize string
}

// observe reads a VolumeSnapshot's state. Ready wins over an error the
// controller has not cleared yet; an error is FAILED even though the
// controller may retry past it (the next change says so).
func observe(vs *snapshotv1.VolumeSnapshot) observation {
	st := vs.Status
	switch {
	case vs.DeletionTimestamp != nil:
		return observation{Status: Deleting, Message: "the snapshot is being deleted"}
	case st == nil:
		return observation{Status: Pending, Message: "waiting for the snapshot controller"}
	}
	var o observation
	if st.RestoreSize != nil {
		o.RestoreSize = st.RestoreSize.String()
	}
	switch {
	case st.ReadyToUse != nil && *st.ReadyToUse:
		o.Status, o.Message = Ready, "ready to restore"
	case st.Error != nil && st.Error.Message != nil:
		o.Status, o.Message = Failed, status.Clean(*st.Error.Message)
	case st.Error != nil:
		o.Status, o.Message = Failed, "the snapshot failed"
	case st.BoundVolumeSnapshotContentName != nil:
		o.Status, o.Message = Pending, "the driver is cutting the snapshot"
	default:
		o.Status, o.Message = Pending, "waiting for the snapshot controller"
	}
	return o
}

// newVolumeSnapshot is the VolumeSnapshot of a snapshot record.
func newVolumeSnapshot(rec record) *snapshotv1.VolumeSnapshot {
	vs := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: rec.ID, Namespace: rec.Namespace, Labels: map[string]string{
			clusters.ManagedByLabel: clusters.ManagedByValue,
			SourceVolumeLabel:       rec.VolumeID,
		}},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &rec.VolumeID}},
	}
	if rec.SnapshotClass != "" {
		vs.Spec.VolumeSnapshotClassName = &rec.SnapshotClass
	}
	return vs
}

// ours reports whether vs is the gateway's VolumeSnapshot of rec's volume.
func ours(vs *snapshotv1.VolumeSnapshot, rec record) bool {
	return vs.Labels[clusters.ManagedByLabel] == clusters.ManagedByValue && vs.Labels[SourceVolumeLabel] == rec.VolumeID
}
