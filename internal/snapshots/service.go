package snapshots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/internal/paging"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

// Timing: a VolumeSnapshot written less than cacheLag ago may not be in
// the cache yet; a recorded create younger than createSettle (longer than
// a request's timeout) may still be under way.
const (
	cacheLag     = 10 * time.Second
	createSettle = time.Minute
)

// Clusters are the live clusters of the environments this replica owns
// (a *clusters.Pool): the reconciler follows their changes.
type Clusters interface {
	Live(environmentID string) (clusters.Live, bool)
	IDs() []string
	Subscribe() *changes.Subscription[clusters.Change]
}

// Options wire a Service.
type Options struct {
	DB    *pgxpool.Pool
	Group *postgres.Group
	// Outbox queues the snapshots' events with their state.
	Outbox *outbox.Writer
	// Volumes answer for the volumes snapshotted, and for whether this
	// replica may read and write an environment now (its lease).
	Volumes      *volumes.Service
	Environments *environments.Service
	Clusters     Clusters
	Logger       *slog.Logger
	// WriteTimeout bounds each write to a cluster (default 10 s).
	WriteTimeout time.Duration
}

// Service implements the snapshot use cases for every environment.
type Service struct {
	repo         repository
	volumes      *volumes.Service
	envs         *environments.Service
	clusters     Clusters
	log          *slog.Logger
	writeTimeout time.Duration
}

// NewService returns a Service.
func NewService(opts Options) *Service {
	s := &Service{repo: repository{db: opts.DB, group: opts.Group, outbox: opts.Outbox}, volumes: opts.Volumes, envs: opts.Environments,
		clusters: opts.Clusters, log: opts.Logger, writeTimeout: opts.WriteTimeout}
	if s.writeTimeout <= 0 {
		s.writeTimeout = 10 * time.Second
	}
	return s
}

// Request is what a snapshot's create asks for.
type Request struct {
	// SnapshotClass is the VolumeSnapshotClass; empty asks for the
	// default of the volume's driver.
	SnapshotClass string `json:"snapshot_class,omitempty"`
}

// identity is what an Idempotency-Key names: the request, of which volume.
type identity struct {
	Kind    string  `json:"kind"`
	Volume  string  `json:"volume"`
	Request Request `json:"request"`
}

// Create snapshots a volume, or returns the existing snapshot for a replay
// (created=false). Either id or idempotencyKey identifies the request.
func (s *Service) Create(ctx context.Context, envID, volumeID, id, idempotencyKey string, req Request) (snap Snapshot, created bool, err error) {
	if req.SnapshotClass != "" && len(validation.IsDNS1123Subdomain(req.SnapshotClass)) > 0 {
		return Snapshot{}, false, fault.Invalid("snapshot_class", "must be a Kubernetes object name (lowercase letters, digits, '-' and '.')")
	}
	env, err := s.envs.Spec(ctx, envID)
	if err != nil {
		return Snapshot{}, false, err
	}
	vol, err := s.volumes.Get(ctx, envID, volumeID)
	if err != nil {
		return Snapshot{}, false, err
	}
	requestedID := id
	key, err := volumes.Identify(ctx, s.repo.db, envID, &id, idempotencyKey, identity{Kind: "snapshot", Volume: volumeID, Request: req})
	if err != nil {
		return Snapshot{}, false, err
	}
	cluster, lease, err := s.volumes.Writable(envID)
	if err != nil {
		return Snapshot{}, false, err
	}
	if key == nil {
		// A given id, or a key seen before: a replay if it is recorded.
		switch rec, err := s.repo.get(ctx, envID, id); {
		case err == nil:
			snap, err := s.replay(ctx, cluster, lease, rec, volumeID, req)
			return snap, false, err
		case !errors.Is(err, errNotFound):
			return Snapshot{}, false, err
		}
	}
	class, err := snapshotClass(cluster, vol, req)
	if err != nil {
		return Snapshot{}, false, err
	}
	rec := record{Snapshot: Snapshot{EnvironmentID: envID, ID: id, VolumeID: volumeID, Namespace: vol.Spec.Namespace,
		SnapshotClass: class, Status: Pending, Message: "creating the snapshot"}}
	switch err := s.repo.insert(ctx, &rec, key, lease, env.Generation); {
	case errors.Is(err, errExists):
		// A concurrent create won: answer as its replay.
		return s.Create(ctx, envID, volumeID, requestedID, idempotencyKey, req)
	case errors.Is(err, errNotWritten):
		current, genErr := s.envs.AtGeneration(ctx, envID, env.Generation)
		switch {
		case genErr != nil:
			return Snapshot{}, false, genErr
		case !current: // decide again on the environment as it is now
			return s.Create(ctx, envID, volumeID, requestedID, idempotencyKey, req)
		}
		return Snapshot{}, false, lease.Lost()
	case err != nil:
		return Snapshot{}, false, err
	}
	snap, err = s.createObject(ctx, cluster, lease, rec)
	if err != nil {
		return Snapshot{}, false, err
	}
	s.log.InfoContext(ctx, "snapshot created", "environment", envID, "volume", volumeID, "snapshot", id, "snapshot_class", class)
	return snap, true, nil
}

// replay answers a create for a snapshot that has a record: the same
// request returns it (creating the VolumeSnapshot if an earlier attempt
// stopped short), another one is a conflict naming what differs.
func (s *Service) replay(ctx context.Context, cluster clusters.Live, lease membership.Lease, rec record, volumeID string, req Request) (Snapshot, error) {
	switch {
	case rec.VolumeID != volumeID:
		return Snapshot{}, &fault.Error{Kind: fault.AlreadyExists, Field: "id",
			Detail: fmt.Sprintf("a snapshot with this id exists of another volume (%s)", rec.VolumeID)}
	case rec.Status == Deleting || rec.Status == Deleted:
		return Snapshot{}, &fault.Error{Kind: fault.AlreadyExists, Field: "id", Detail: "the snapshot with this id is being or has been deleted"}
	case req.SnapshotClass != "" && req.SnapshotClass != rec.SnapshotClass:
		return Snapshot{}, &fault.Error{Kind: fault.AlreadyExists, Field: "id",
			Detail: fmt.Sprintf("a snapshot with this id exists with snapshot class %s", rec.SnapshotClass)}
	}
	if _, found, synced := cluster.Snapshot(rec.Namespace, rec.ID); found || synced && gone(rec) || rec.UID != "" {
		return view(cluster, rec)
	}
	return s.createObject(ctx, cluster, lease, rec)
}

// snapshotClass checks the class a request names against the cluster's,
// or picks the default of the volume's driver, before anything is
// written. Where the gateway may not read the classes, the cluster
// decides.
func snapshotClass(cluster clusters.Live, vol volumes.Volume, req Request) (string, error) {
	const field = "snapshot_class"
	pvc, ok := cluster.PVC(vol.Spec.Namespace, vol.ID)
	if !ok || pvc.DeletionTimestamp != nil {
		return "", volumes.NoClaim(vol.ID, "snapshot")
	}
	if err := volumes.Bound(pvc, "snapshot"); err != nil {
		return "", err
	}
	class, _ := cluster.ClassOf(pvc)
	if class == nil {
		return "", &fault.Error{Kind: fault.FailedPrecondition, Field: field,
			Detail: fmt.Sprintf("volume %s's storage class %s is gone: its driver, and so its snapshot classes, are unknown", vol.ID, vol.Spec.StorageClass)}
	}
	objs := cluster.StorageObjects()
	if objs.SnapshotClassesDenied {
		return req.SnapshotClass, nil
	}
	driver := class.Provisioner
	_, offered := capabilities.SnapshotSupport(objs, driver)
	if req.SnapshotClass != "" {
		if slices.Contains(offered, req.SnapshotClass) {
			return req.SnapshotClass, nil
		}
		for _, c := range objs.SnapshotClasses {
			if c.Name == req.SnapshotClass {
				return "", &fault.Error{Kind: fault.FailedPrecondition, Field: field, Detail: fmt.Sprintf(
					"%s is for driver %s; volume %s's storage class %s uses %s%s", c.Name, c.Driver, vol.ID, class.Name, driver, offering(offered))}
			}
		}
		// One created since the classes were last listed: they are
		// listed again within seconds.
		cluster.StorageRequested()
		return "", &fault.Error{Kind: fault.FailedPrecondition, Field: field, Detail: fmt.Sprintf(
			"VolumeSnapshotClass %s does not exist in the cluster (one created just now is seen within seconds)%s", req.SnapshotClass, offering(offered))}
	}
	var defaults []string
	for _, c := range objs.SnapshotClasses {
		if c.Driver == driver && c.Annotations[capabilities.DefaultSnapshotClassAnnotation] == "true" {
			defaults = append(defaults, c.Name)
		}
	}
	switch {
	case len(defaults) == 1:
		return defaults[0], nil
	case len(offered) == 0:
		return "", &fault.Error{Kind: fault.FailedPrecondition, Field: field, Detail: fmt.Sprintf(
			"volume %s cannot be snapshotted: its driver %s (storage class %s) has no VolumeSnapshotClass in the cluster", vol.ID, driver, class.Name)}
	case len(defaults) == 0:
		return "", &fault.Error{Kind: fault.FailedPrecondition, Field: field,
			Detail: fmt.Sprintf("is required: driver %s has no default VolumeSnapshotClass%s", driver, offering(offered))}
	}
	return "", &fault.Error{Kind: fault.FailedPrecondition, Field: field,
		Detail: fmt.Sprintf("is required: driver %s has several default VolumeSnapshotClasses (%s)", driver, strings.Join(defaults, ", "))}
}

// offering names the classes a request may name, if any.
func offering(classes []string) string {
	if len(classes) == 0 {
		return ""
	}
	return "; name one of: " + strings.Join(classes, ", ")
}

// createObject creates the snapshot's VolumeSnapshot (or finds it made)
// and returns the snapshot as it shows it. A VolumeSnapshot of that name
// the gateway did not make for the volume is a conflict; the record is
// dropped whenever the cluster refused for good, and kept when the outcome
// is unknown so the reconciler or a retry completes it.
func (s *Service) createObject(ctx context.Context, cluster clusters.Live, lease membership.Lease, rec record) (Snapshot, error) {
	snaps := cluster.SnapshotClient().VolumeSnapshots(rec.Namespace)
	writeCtx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	vs, err := snaps.Create(writeCtx, newVolumeSnapshot(rec), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if vs, err = snaps.Get(writeCtx, rec.ID, metav1.GetOptions{}); err == nil && !ours(vs, rec) {
			s.forget(ctx, lease, rec)
			return Snapshot{}, &fault.Error{Kind: fault.AlreadyExists, Field: "id", Detail: fmt.Sprintf(
				"a VolumeSnapshot named %s that is not the gateway's snapshot of volume %s exists in namespace %s", rec.ID, rec.VolumeID, rec.Namespace)}
		}
	}
	if err != nil {
		ferr := volumes.KubernetesError(err, "VolumeSnapshot", "create the VolumeSnapshot")
		if apierrors.IsNotFound(err) {
			ferr = fault.New(fault.FailedPrecondition, "the cluster does not serve the VolumeSnapshot API (snapshot.storage.k8s.io/v1), or namespace %s is gone", rec.Namespace)
		}
		if volumes.RefusedForGood(ferr) {
			s.forget(ctx, lease, rec)
		}
		return Snapshot{}, ferr
	}
	cluster.FollowSnapshots()
	o := observe(vs)
	if err := s.record(ctx, rec, o, string(vs.UID), lease); err != nil {
		s.log.WarnContext(ctx, "record a snapshot's VolumeSnapshot (the reconciler catches up)",
			"environment", rec.EnvironmentID, "snapshot", rec.ID, "error", err)
	}
	return withObservation(rec, o), nil
}

// record stores what the cluster shows of a snapshot, with its event when
// its state changed (repository.observed), under lease.
func (s *Service) record(ctx context.Context, rec record, o observation, uid string, lease membership.Lease) error {
	env, err := s.envs.Spec(ctx, rec.EnvironmentID)
	if err != nil {
		return err
	}
	return s.repo.observed(ctx, rec, o, uid, lease, env.Spec.DCM.ProviderName)
}

// forget drops the record of a snapshot the cluster refused.
func (s *Service) forget(ctx context.Context, lease membership.Lease, rec record) {
	if err := s.repo.remove(context.WithoutCancel(ctx), rec, lease); err != nil {
		s.log.ErrorContext(ctx, "drop the record of a refused snapshot", "environment", rec.EnvironmentID, "snapshot", rec.ID, "error", err)
	}
}

// gone reports a snapshot whose VolumeSnapshot existed (or whose deletion
// was asked for) and is not in the synced cache: it is not found, even
// before the reconciler records it DELETED. A VolumeSnapshot created
// moments ago may not be cached yet, hence cacheLag.
func gone(rec record) bool {
	return rec.Status == Deleting || rec.UID != "" && settled(rec, cacheLag)
}

// view merges a record with its cached VolumeSnapshot.
func view(cluster clusters.Live, rec record) (Snapshot, error) {
	vs, found, synced := cluster.Snapshot(rec.Namespace, rec.ID)
	switch {
	case found && ours(vs, rec):
		return fromObject(rec, vs), nil
	case synced && gone(rec):
		return Snapshot{}, fault.New(fault.NotFound, "snapshot %s was deleted", rec.ID)
	}
	return rec.Snapshot, nil
}

// fromObject is the snapshot as its VolumeSnapshot shows it; a deletion
// the gateway asked for shows before the cache has it.
func fromObject(rec record, vs *snapshotv1.VolumeSnapshot) Snapshot {
	o := observe(vs)
	if rec.Status == Deleting {
		o.Status, o.Message = Deleting, "the snapshot is being deleted"
	}
	return withObservation(rec, o)
}

func withObservation(rec record, o observation) Snapshot {
	snap := rec.Snapshot
	snap.Status, snap.Message, snap.RestoreSize = o.Status, o.Message, o.RestoreSize
	return snap
}

// live returns a snapshot's record unless it is unknown, gone, or not of
// the volume named.
func (s *Service) live(ctx context.Context, envID, volumeID, id string) (record, error) {
	if err := s.envs.Exists(ctx, envID); err != nil {
		return record{}, err
	}
	rec, err := s.repo.get(ctx, envID, id)
	if errors.Is(err, errNotFound) || err == nil && (rec.Status == Deleted || rec.VolumeID != volumeID) {
		return record{}, fault.New(fault.NotFound, "snapshot %s of volume %s not found in environment %s", id, volumeID, envID)
	}
	return rec, err
}

// Get returns one snapshot of a volume.
func (s *Service) Get(ctx context.Context, envID, volumeID, id string) (Snapshot, error) {
	rec, err := s.live(ctx, envID, volumeID, id)
	if err != nil {
		return Snapshot{}, err
	}
	cluster, _, err := s.volumes.Readable(envID)
	if err != nil {
		return Snapshot{}, err
	}
	return view(cluster, rec)
}

// Page is one page of snapshots.
type Page struct {
	Snapshots     []Snapshot
	NextPageToken string
}

// List returns a volume's snapshots in id order — also those of a volume
// deleted since, which outlive it.
func (s *Service) List(ctx context.Context, envID, volumeID string, maxPageSize int, pageToken string) (Page, error) {
	if err := s.envs.Exists(ctx, envID); err != nil {
		return Page{}, err
	}
	size, err := paging.Size(maxPageSize)
	if err != nil {
		return Page{}, err
	}
	filter := envID + "/" + volumeID
	after, err := paging.After(pageToken, filter)
	if err != nil {
		return Page{}, err
	}
	cluster, _, err := s.volumes.Readable(envID)
	if err != nil {
		return Page{}, err
	}
	recs, err := s.repo.list(ctx, envID, volumeID, after, size+1)
	if err != nil {
		return Page{}, err
	}
	var page Page
	recs, page.NextPageToken = paging.Cut(recs, size, func(r record) string { return r.ID }, filter)
	for _, rec := range recs {
		if snap, err := view(cluster, rec); err == nil {
			page.Snapshots = append(page.Snapshots, snap)
		}
	}
	return page, nil
}

// Delete deletes a snapshot's VolumeSnapshot (the driver's snapshot goes
// as its class's deletion policy says). Unknown or finished snapshots are
// NotFound; a deletion under way is accepted again.
func (s *Service) Delete(ctx context.Context, envID, volumeID, id string) error {
	rec, err := s.live(ctx, envID, volumeID, id)
	if err != nil {
		return err
	}
	cluster, lease, err := s.volumes.Writable(envID)
	if err != nil {
		return err
	}
	if _, err := view(cluster, rec); err != nil {
		return err
	}
	writeCtx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	err = cluster.SnapshotClient().VolumeSnapshots(rec.Namespace).Delete(writeCtx, id, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return volumes.KubernetesError(err, "VolumeSnapshot", "delete the VolumeSnapshot")
	}
	deleting := observation{Status: Deleting, Message: "the snapshot is being deleted", RestoreSize: rec.RestoreSize}
	if err := s.record(ctx, rec, deleting, "", lease); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "snapshot deletion requested", "environment", envID, "volume", volumeID, "snapshot", id)
	return nil
}
