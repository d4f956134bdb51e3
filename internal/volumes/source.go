package volumes

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
)

// SnapshotSources tell what a restore needs of one of an environment's
// snapshots; the snapshots package answers (it depends on this one).
type SnapshotSources interface {
	// SnapshotSource returns the snapshot; found is false for one the
	// environment does not have (another environment's among them).
	SnapshotSource(ctx context.Context, envID, id string) (src SnapshotSource, found bool, err error)
}

// SnapshotSource is what a restore needs of a snapshot.
type SnapshotSource struct {
	VolumeID, Namespace string
	// Status is the snapshot's: PENDING, READY, FAILED, DELETING, DELETED.
	Status string
	// RestoreSize is empty until the driver says.
	RestoreSize string
}

// checkSource checks what a new volume is to be filled from against the
// environment, before anything is written, and records it in spec. A
// restore lands in its snapshot's namespace, at least as large as its
// restore size; a clone in its source volume's, at least as large; and
// either is made by the source's CSI driver, in its volume mode.
func (s *Service) checkSource(ctx context.Context, env environment, cluster clusters.Live, spec *Spec, src *Source) error {
	if src == nil {
		return nil
	}
	const hints = "spec.provider_hints.kubernetes."
	spec.Source = src
	what, field, namespace, minimum := "clone", hints+"source.volume", "", ""
	var from record
	if src.Snapshot != "" {
		what, field = "restore", hints+"source.snapshot"
		snap, found, err := s.snapshots.SnapshotSource(ctx, env.ID, src.Snapshot)
		switch {
		case err != nil:
			return err
		case !found:
			return &fault.Error{Kind: fault.FailedPrecondition, Field: field, Detail: fmt.Sprintf("snapshot %s not found in environment %s", src.Snapshot, env.ID)}
		case snap.Status == "FAILED" || snap.Status == "DELETING" || snap.Status == "DELETED":
			return &fault.Error{Kind: fault.FailedPrecondition, Field: field, Detail: fmt.Sprintf("snapshot %s is %s: it cannot be restored", src.Snapshot, snap.Status)}
		}
		namespace, minimum = snap.Namespace, snap.RestoreSize
		if from, err = s.repo.get(ctx, env.ID, snap.VolumeID); err != nil && !errors.Is(err, errNotFound) {
			return err
		}
	} else {
		var err error
		if from, err = s.live(ctx, env.ID, src.Volume); err != nil {
			if fault.Is(err, fault.NotFound) {
				return &fault.Error{Kind: fault.FailedPrecondition, Field: field, Detail: fmt.Sprintf("volume %s not found in environment %s", src.Volume, env.ID)}
			}
			return err
		}
		namespace, minimum = from.Spec.Namespace, from.Spec.Capacity
	}
	if spec.Namespace != namespace {
		return &fault.Error{Kind: fault.FailedPrecondition, Field: hints + "namespace",
			Detail: fmt.Sprintf("a %s lands in its source's namespace, %s", what, namespace)}
	}
	size := resource.MustParse(spec.Capacity) // validated
	if low, err := resource.ParseQuantity(minimum); err == nil && size.Cmp(low) < 0 {
		return &fault.Error{Kind: fault.FailedPrecondition, Field: "spec.capacity",
			Detail: fmt.Sprintf("a %s must be at least its source's size, %s", what, minimum)}
	}
	if from.ID == "" {
		return nil // the snapshot's volume was forgotten: the cluster decides
	}
	if from.Spec.VolumeMode != spec.VolumeMode {
		return &fault.Error{Kind: fault.FailedPrecondition, Field: hints + "volume_mode",
			Detail: fmt.Sprintf("a %s keeps its source's volume mode, %s", what, from.Spec.VolumeMode)}
	}
	source, ok1 := cluster.StorageClass(from.Spec.StorageClass)
	target, ok2 := cluster.StorageClass(spec.StorageClass)
	if ok1 && ok2 && source.Provisioner != target.Provisioner {
		return &fault.Error{Kind: fault.FailedPrecondition, Field: hints + "storage_class", Detail: fmt.Sprintf(
			"a %s is made by its source's driver, %s; storage class %s uses %s", what, source.Provisioner, target.Name, target.Provisioner)}
	}
	return nil
}
