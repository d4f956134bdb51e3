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

// filling is what a new volume is to be filled from, as the environment
// records it: a snapshot (restored) or a volume (cloned).
type filling struct {
	src         *Source
	what, field string
	// namespace and minimum are where the source is and its size.
	namespace, minimum string
	// from is the volume the source is of; empty when a snapshot's volume
	// was forgotten (the cluster then decides what the restore may be).
	from record
}

// lookUpSource finds src in the environment, refusing one it does not
// have or that cannot be restored.
func (s *Service) lookUpSource(ctx context.Context, env environment, src *Source) (filling, error) {
	const hints = "spec.provider_hints.kubernetes."
	if src.Snapshot != "" {
		f := filling{src: src, what: "restore", field: hints + "source.snapshot"}
		snap, found, err := s.snapshots.SnapshotSource(ctx, env.ID, src.Snapshot)
		switch {
		case err != nil:
			return filling{}, err
		case !found:
			return filling{}, &fault.Error{Kind: fault.FailedPrecondition, Field: f.field, Detail: fmt.Sprintf("snapshot %s not found in environment %s", src.Snapshot, env.ID)}
		case snap.Status == "FAILED" || snap.Status == "DELETING" || snap.Status == "DELETED":
			return filling{}, &fault.Error{Kind: fault.FailedPrecondition, Field: f.field, Detail: fmt.Sprintf("snapshot %s is %s: it cannot be restored", src.Snapshot, snap.Status)}
		}
		f.namespace, f.minimum = snap.Namespace, snap.RestoreSize
		if f.from, err = s.repo.get(ctx, env.ID, snap.VolumeID); err != nil && !errors.Is(err, errNotFound) {
			return filling{}, err
		}
		return f, nil
	}
	f := filling{src: src, what: "clone", field: hints + "source.volume"}
	from, err := s.live(ctx, env.ID, src.Volume)
	if fault.Is(err, fault.NotFound) {
		return filling{}, &fault.Error{Kind: fault.FailedPrecondition, Field: f.field, Detail: fmt.Sprintf("volume %s not found in environment %s", src.Volume, env.ID)}
	} else if err != nil {
		return filling{}, err
	}
	f.from, f.namespace, f.minimum = from, from.Spec.Namespace, from.Spec.Capacity
	return f, nil
}

// defaults fills what req leaves open from the source: a restore or clone
// lands in its source's namespace, in its class and volume mode, unless
// asked otherwise (the environment's defaults would mostly be refused).
func (f filling) defaults(req Request) Request {
	req.Hints.Namespace = first(req.Hints.Namespace, f.namespace)
	if f.from.ID != "" {
		req.Hints.StorageClass = first(req.Hints.StorageClass, f.from.Spec.StorageClass)
		req.Hints.VolumeMode = first(req.Hints.VolumeMode, f.from.Spec.VolumeMode)
	}
	return req
}

// check checks the new volume's resolved spec against its source and
// records the source in it: a restore lands in its snapshot's namespace,
// at least as large as its restore size; a clone in its source volume's,
// at least as large; and either is made by the source's CSI driver, in its
// volume mode.
func (f filling) check(cluster clusters.Live, spec *Spec) error {
	const hints = "spec.provider_hints.kubernetes."
	spec.Source = f.src
	if spec.Namespace != f.namespace {
		return &fault.Error{Kind: fault.FailedPrecondition, Field: hints + "namespace",
			Detail: fmt.Sprintf("a %s lands in its source's namespace, %s", f.what, f.namespace)}
	}
	size := resource.MustParse(spec.Capacity) // validated
	if low, err := resource.ParseQuantity(f.minimum); err == nil && size.Cmp(low) < 0 {
		return &fault.Error{Kind: fault.FailedPrecondition, Field: "spec.capacity",
			Detail: fmt.Sprintf("a %s must be at least its source's size, %s", f.what, f.minimum)}
	}
	from := f.from
	if from.ID == "" {
		return nil // the snapshot's volume was forgotten: the cluster decides
	}
	if from.Spec.VolumeMode != spec.VolumeMode {
		return &fault.Error{Kind: fault.FailedPrecondition, Field: hints + "volume_mode",
			Detail: fmt.Sprintf("a %s keeps its source's volume mode, %s", f.what, from.Spec.VolumeMode)}
	}
	source, ok1 := cluster.StorageClass(from.Spec.StorageClass)
	target, ok2 := cluster.StorageClass(spec.StorageClass)
	if ok1 && ok2 && source.Provisioner != target.Provisioner {
		return &fault.Error{Kind: fault.FailedPrecondition, Field: hints + "storage_class", Detail: fmt.Sprintf(
			"a %s is made by its source's driver, %s; storage class %s uses %s", f.what, source.Provisioner, target.Name, target.Provisioner)}
	}
	return nil
}
