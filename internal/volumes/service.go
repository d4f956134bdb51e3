package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// Clusters are the live clusters of the environments this replica owns
// (a *clusters.Pool): the service reads and writes through them and its
// reconciler follows their changes.
type Clusters interface {
	Live(environmentID string) (clusters.Live, bool)
	IDs() []string
	Subscribe() *changes.Subscription[clusters.Change]
	// FollowPVCs hands every environment's claim changes to the handler
	// made for it (see clusters.Pool.FollowPVCs).
	FollowPVCs(handler func(environmentID string) cache.ResourceEventHandler)
}

// Options wires a Service.
type Options struct {
	DB           *pgxpool.Pool
	Environments *environments.Service
	Clusters     Clusters
	Logger       *slog.Logger
	// Recorder records the volumes' status (the gateway's one writer of
	// it): a create its first status, with the claim.
	Recorder status.Recorder
	// Tracker hears of the creates under way and the first status each
	// records, so the status follower does not write it again.
	Tracker *status.Tracker
	// Leases fence the status the service records (status.Recorder): this
	// replica records only for the environments it owns.
	Leases membership.Leases
	// Group commits a create's intent with the process's other hot
	// writes.
	Group *postgres.Group
	// Snapshots answer for the snapshots a volume is restored from.
	Snapshots SnapshotSources
	// WriteTimeout bounds each write to a cluster an API request makes
	// (default 10 s): a frozen API server answers the caller 503 within
	// it, and the reconciler settles what the write did.
	WriteTimeout time.Duration
}

// Service implements the volume use cases for every environment.
type Service struct {
	repo     repository
	recorder status.Recorder
	tracker  *status.Tracker
	envs     *environments.Service
	clusters Clusters
	leases   membership.Leases
	// snapshots: see Options.Snapshots.
	snapshots SnapshotSources
	log       *slog.Logger
	// writeTimeout: see Options.WriteTimeout.
	writeTimeout time.Duration
	// installation is this installation's identity once read (see
	// owner).
	installation atomic.Pointer[string]
	// counted serializes the unadopted-claim counts and remembers, for
	// each environment whose last count was zero, the claim epoch it was
	// written under (liveCounted).
	counted struct {
		sync.Mutex
		zero map[string]int64
	}
}

// NewService returns a Service.
func NewService(opts Options) *Service {
	s := &Service{
		repo: repository{db: opts.DB, group: opts.Group}, recorder: opts.Recorder, tracker: opts.Tracker,
		envs: opts.Environments, clusters: opts.Clusters, leases: opts.Leases, snapshots: opts.Snapshots, log: opts.Logger, writeTimeout: opts.WriteTimeout,
	}
	if s.writeTimeout <= 0 {
		s.writeTimeout = 10 * time.Second
	}
	s.counted.zero = map[string]int64{}
	return s
}

// Create creates a volume, or returns the existing one for a replay
// (created=false). Either id or idempotencyKey identifies the request.
//
// A create usually makes a new volume, so the record is inserted first and
// the existing one read only when the insert finds it there (a replay, or a
// concurrent create of the same volume that won): one round trip to
// Postgres fewer on the common path.
func (s *Service) Create(ctx context.Context, envID, id, idempotencyKey string, req Request) (v Volume, created bool, err error) {
	if err := req.validate(); err != nil {
		return Volume{}, false, err
	}
	env, err := s.environment(ctx, envID)
	if err != nil {
		return Volume{}, false, err
	}
	requestedID := id
	key, err := Identify(ctx, s.repo.db, envID, &id, idempotencyKey, req)
	if err != nil {
		return Volume{}, false, err
	}
	cluster, lease, err := s.Writable(envID)
	if err != nil {
		return Volume{}, false, err
	}
	// A given id, or one drawn for a new idempotency key, is most likely a
	// new volume: create it, and replay only if it exists. An idempotency
	// key seen before names the volume an earlier request created: read it.
	if requestedID != "" || key != nil {
		v, err := s.createNew(ctx, env, cluster, lease, id, key, req)
		switch {
		case errors.Is(err, errStaleSpec):
			// Decide again on the environment as it is now.
			return s.Create(ctx, envID, requestedID, idempotencyKey, req)
		case !errors.Is(err, errExists):
			return v, err == nil, err
		case key != nil:
			// A concurrent request with the same idempotency key won:
			// the key names its volume now.
			return s.Create(ctx, envID, requestedID, idempotencyKey, req)
		}
	}
	rec, err := s.repo.get(ctx, envID, id)
	if errors.Is(err, errNotFound) {
		// Gone since (a refused claim's record is dropped): create it.
		v, err := s.createNew(ctx, env, cluster, lease, id, nil, req)
		if errors.Is(err, errExists) || errors.Is(err, errStaleSpec) {
			return s.Create(ctx, envID, requestedID, idempotencyKey, req)
		}
		return v, err == nil, err
	}
	if err != nil {
		return Volume{}, false, err
	}
	return s.replay(ctx, env, cluster, lease, rec, req)
}

// environment is what a volume write needs of its environment: its id,
// its spec and the generation the spec is of.
type environment struct {
	ID         string
	Spec       environments.Spec
	Generation int64
}

func (s *Service) environment(ctx context.Context, id string) (environment, error) {
	v, err := s.envs.Spec(ctx, id)
	return environment{ID: id, Spec: v.Spec, Generation: v.Generation}, err
}

// owner is envID as the owner of the claims it makes: the installation's
// identity is read once (drawn by the first replica that needs it) and
// kept, so only the first use costs a round trip.
func (s *Service) owner(ctx context.Context, envID string) (owner, error) {
	id, err := s.Installation(ctx)
	return owner{installation: id, environment: envID}, err
}

// Installation is this installation's identity (the same for every
// replica on one database), read once and kept.
func (s *Service) Installation(ctx context.Context) (string, error) {
	if id := s.installation.Load(); id != nil {
		return *id, nil
	}
	id, err := s.repo.installationID(ctx)
	if err != nil {
		return "", fmt.Errorf("read the installation's identity: %w", err)
	}
	s.installation.Store(&id)
	return id, nil
}

// createNew records a new volume and creates its claim; errExists says the
// volume has a record already. A request the environment cannot serve is
// refused only once it is known not to be a replay of an existing volume,
// which is answered whatever the environment's settings are now.
func (s *Service) createNew(ctx context.Context, env environment, cluster clusters.Live, lease membership.Lease, id string, key *Key, req Request) (Volume, error) {
	spec, err := s.resolveFilled(ctx, env, cluster, req)
	if err != nil {
		if _, getErr := s.repo.get(ctx, env.ID, id); getErr == nil {
			return Volume{}, errExists
		}
		// A refusal, too, is decided under the current spec.
		if current, genErr := s.envs.AtGeneration(ctx, env.ID, env.Generation); genErr == nil && !current {
			return Volume{}, errStaleSpec
		}
		return Volume{}, err
	}
	rec := record{EnvironmentID: env.ID, ID: id, Spec: spec, Status: status.Provisioning, Message: "creating the claim"}
	switch err := s.repo.insert(ctx, &rec, key, lease, env.Generation); {
	case errors.Is(err, errNoEnvironment):
		return Volume{}, fault.New(fault.NotFound, "environment %q not found", env.ID)
	case errors.Is(err, errNotWritten):
		return Volume{}, s.notWritten(ctx, env, lease)
	case err != nil:
		return Volume{}, err
	}
	v, err := s.createClaim(ctx, env, cluster, lease, rec)
	if err != nil {
		return Volume{}, err
	}
	cluster.StorageRequested()
	s.log.InfoContext(ctx, "volume created", "environment", env.ID, "volume", id, "namespace", spec.Namespace, "storage_class", spec.StorageClass)
	return v, nil
}

// notWritten says why a create's record was fenced off: the spec it was
// decided under is stale (errStaleSpec: the environment was updated or
// deleted since Spec read it), or the lease is lost.
func (s *Service) notWritten(ctx context.Context, env environment, lease membership.Lease) error {
	current, err := s.envs.AtGeneration(ctx, env.ID, env.Generation)
	switch {
	case err != nil:
		return err
	case !current:
		return errStaleSpec
	}
	return lease.Lost()
}

// replay answers a create for a volume that has a record: the same spec
// returns it (creating the claim if an earlier attempt stopped short), a
// different one is a conflict naming the fields.
func (s *Service) replay(ctx context.Context, env environment, cluster clusters.Live, lease membership.Lease, rec record, req Request) (Volume, bool, error) {
	if err := replayRefused(rec, req); err != nil {
		return Volume{}, false, err
	}
	o, err := s.owner(ctx, rec.EnvironmentID)
	if err != nil {
		return Volume{}, false, err
	}
	if pvc, ok := cluster.PVC(rec.Spec.Namespace, rec.ID); ok && (rec.PVCUID == "" || o.holderOf(pvc, rec.ID, rec.PVCUID) == heldHere) {
		if err := s.refuseClaim(ctx, lease, o, rec, pvc); err != nil {
			return Volume{}, false, err
		}
		return s.fromClaim(cluster, rec, pvc), false, nil
	}
	if claimGone(cluster, o, rec) {
		return Volume{}, false, &fault.Error{Kind: fault.AlreadyExists, Field: "id", Detail: "the volume with this id has been deleted"}
	}
	v, err := s.createClaim(ctx, env, cluster, lease, rec)
	return v, false, err
}

// replayRefused says why a repeated create cannot be answered with the
// volume recorded under its id (nil if it can): the volume is being or has
// been deleted, or the request differs from the spec it was created with.
func replayRefused(rec record, req Request) error {
	if rec.Status == status.Deleting || rec.Status == status.Deleted {
		return &fault.Error{Kind: fault.AlreadyExists, Field: "id", Detail: "the volume with this id is being or has been deleted"}
	}
	if diff := req.differences(rec.Spec); len(diff) > 0 {
		return &fault.Error{Kind: fault.AlreadyExists, Field: "id",
			Detail: "a volume with this id exists with a different spec: " + strings.Join(diff, ", ")}
	}
	return nil
}

// clusterWrite bounds one write of an API request to a cluster (see
// Options.WriteTimeout); kubernetesError answers one past it 503.
func (s *Service) clusterWrite(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.writeTimeout)
}

// createClaim creates (or adopts) the volume's PVC and returns the volume
// as the claim shows it. A claim of that name the gateway does not manage
// is a conflict; the record is dropped whenever the cluster refused the
// claim for good, and kept when the outcome is unknown so the reconciler or
// a retry completes it.
func (s *Service) createClaim(ctx context.Context, env environment, cluster clusters.Live, lease membership.Lease, rec record) (Volume, error) {
	// The status follower holds what it sees of the claim until the
	// first status is recorded here (or not).
	var first *status.Observation
	done := s.tracker.Creating(rec.EnvironmentID, rec.ID)
	defer func() { done(first) }()
	o, err := s.owner(ctx, rec.EnvironmentID)
	if err != nil {
		return Volume{}, err
	}
	claims := cluster.Client().PersistentVolumeClaims(rec.Spec.Namespace)
	writeCtx, cancel := s.clusterWrite(ctx)
	defer cancel()
	pvc, err := claims.Create(writeCtx, newPVC(rec.ID, rec.Spec, o), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		pvc, err = claims.Get(writeCtx, rec.ID, metav1.GetOptions{})
		if err == nil {
			if err := s.refuseClaim(ctx, lease, o, rec, pvc); err != nil {
				return Volume{}, err
			}
		}
	}
	if err != nil {
		ferr := kubernetesError(err, "create the claim")
		if RefusedForGood(ferr) {
			s.forget(ctx, lease, rec)
		}
		return Volume{}, ferr
	}
	v := s.fromClaim(cluster, rec, pvc)
	live, first, err := s.recordClaim(ctx, env, lease, rec, pvc, v)
	if err != nil {
		s.log.WarnContext(ctx, "record the claim of a volume and its first status (the reconciler and the status follower catch up)",
			"environment", rec.EnvironmentID, "volume", rec.ID, "error", err)
	}
	if err == nil && !live {
		// The volume was deleted while its claim was being created.
		if err := claims.Delete(context.WithoutCancel(ctx), rec.ID, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			s.log.ErrorContext(ctx, "delete the claim of a volume deleted meanwhile (the reconciler retries)", "environment", rec.EnvironmentID, "volume", rec.ID, "error", err)
		}
		return Volume{}, fault.New(fault.NotFound, "volume %s was deleted while its claim was being created", rec.ID)
	}
	return v, nil
}

// recordClaim stores the claim that serves a volume and the volume's first
// status (with its event) together (status.Recorder.RecordCreated): the
// status goes out now, not when the cache catches up, so DCM hears of the
// volume even if it binds before the status follower sees it; v is the
// volume as the claim shows it. It reports false, recording nothing, when
// the volume is being or has been deleted meanwhile, and returns the status
// it recorded (nil when the follower had recorded one already).
func (s *Service) recordClaim(ctx context.Context, env environment, lease membership.Lease, rec record, pvc *corev1.PersistentVolumeClaim, v Volume) (live bool, recorded *status.Observation, err error) {
	first := status.Observation{EnvironmentID: rec.EnvironmentID, VolumeID: rec.ID, Status: v.Status, Message: v.Message}
	live, queued, err := s.recorder.RecordCreated(ctx, lease, status.Created{Observation: first, ClaimUID: string(pvc.UID),
		Provider: env.Spec.DCM.ProviderName, CreateTime: rec.CreateTime})
	if err != nil || !queued {
		return live, nil, err
	}
	return live, &first, nil
}

// RefusedForGood reports whether the cluster's answer to a create (as
// KubernetesError classified it) means the object will never be made as
// recorded: the record goes. An unknown outcome (no answer, an internal
// error) keeps it, for a retry or the reconciler to complete.
func RefusedForGood(err error) bool {
	return fault.Is(err, fault.InvalidArgument) || fault.Is(err, fault.Conflict) || fault.Is(err, fault.FailedPrecondition)
}

// refuseClaim decides whether a create (of rec, which o records) may
// answer with pvc, the claim of its name it found, and if not says why
// (AlreadyExists, naming who holds the claim), dropping the create's
// record if it never held a claim (one that did is the reconciler's to
// report DELETED). Only o's own claim serves, and only as what was asked for: a
// claim o's record did not hold yet (a create meeting a claim o made
// earlier, whose record was forgotten) is a replay only when its class,
// modes and capacity are the request's. Nothing is adopted implicitly.
func (s *Service) refuseClaim(ctx context.Context, lease membership.Lease, o owner, rec record, pvc *corev1.PersistentVolumeClaim) error {
	refusal := claimRefusal(o, rec, pvc)
	if refusal != nil && rec.PVCUID == "" {
		s.forget(ctx, lease, rec)
	}
	return refusal
}

// claimRefusal is refuseClaim's decision (nil: pvc serves rec).
func claimRefusal(o owner, rec record, pvc *corev1.PersistentVolumeClaim) error {
	held := func(format string, args ...any) error {
		return &fault.Error{Kind: fault.AlreadyExists, Field: "id", Detail: fmt.Sprintf(format, args...)}
	}
	where := fmt.Sprintf("a PVC named %s in namespace %s", rec.ID, rec.Spec.Namespace)
	switch o.holderOf(pvc, rec.ID, rec.PVCUID) {
	case heldByNobody:
		return held("%s exists that the gateway does not manage", where)
	case heldByProvider:
		return held("%s labelled for DCM by another provider exists; an admin adopts it (POST …/environments/%s:adopt)", where, rec.EnvironmentID)
	case heldElsewhere, heldUnlabelled:
		return held("%s is held by %s; only an admin's adoption with take_over moves it to environment %s", where, o.heldBy(pvc), rec.EnvironmentID)
	}
	if rec.PVCUID == string(pvc.UID) {
		return nil
	}
	if diff := specDifferences(pvc, rec.Spec); len(diff) > 0 {
		return held("%s made for this environment exists with a different spec: %s", where, strings.Join(diff, ", "))
	}
	return nil
}

// forget drops the record of a volume whose claim the cluster refused.
func (s *Service) forget(ctx context.Context, lease membership.Lease, rec record) {
	if err := s.repo.remove(context.WithoutCancel(ctx), rec.EnvironmentID, rec.ID, lease); err != nil {
		s.log.ErrorContext(ctx, "drop the record of a refused volume", "environment", rec.EnvironmentID, "volume", rec.ID, "error", err)
	}
}

// resolveFilled is resolve for a request that may fill the new volume from
// a source (source.go): the source is looked up first, its settings fill
// what the request leaves open, and the result is checked against it.
func (s *Service) resolveFilled(ctx context.Context, env environment, cluster clusters.Live, req Request) (Spec, error) {
	if req.Hints.Source == nil {
		return resolve(env, cluster, req)
	}
	f, err := s.lookUpSource(ctx, env, req.Hints.Source)
	if err != nil {
		return Spec{}, err
	}
	spec, err := resolve(env, cluster, f.defaults(req))
	if err != nil {
		return Spec{}, err
	}
	return spec, f.check(cluster, &spec)
}

// resolve fills the request's open settings and checks them against the
// environment and the storage class (the API contract's createVolume).
func resolve(env environment, cluster clusters.Live, req Request) (Spec, error) {
	const hints = "spec.provider_hints.kubernetes."
	spec := Spec{Name: req.Name, Labels: req.Labels, Capacity: canonicalCapacity(req.Capacity),
		Namespace: first(req.Hints.Namespace, env.Spec.Namespace)}
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	if !slices.Contains(env.Spec.Namespaces(), spec.Namespace) {
		return Spec{}, &fault.Error{Kind: fault.FailedPrecondition, Field: hints + "namespace",
			Detail: "is not one of the environment's namespaces: " + strings.Join(env.Spec.Namespaces(), ", ")}
	}
	class, err := storageClass(cluster, first(req.Hints.StorageClass, env.Spec.Defaults.StorageClass))
	if err != nil {
		return Spec{}, err
	}
	spec.StorageClass = class.Name
	spec.AccessMode = first(req.Hints.AccessMode, env.Spec.Defaults.AccessMode, string(corev1.ReadWriteOnce))
	spec.VolumeMode = first(req.Hints.VolumeMode, env.Spec.Defaults.VolumeMode, string(corev1.PersistentVolumeFilesystem))
	if m := capabilities.AccessModes(class, env.Spec.CapabilityOverrides); !m.Allows(spec.AccessMode) {
		return Spec{}, &fault.Error{Kind: fault.FailedPrecondition, Field: hints + "access_mode",
			Detail: fmt.Sprintf("storage class %s does not support %s; it supports %s", class.Name, spec.AccessMode, strings.Join(m.Supported, ", "))}
	}
	if m := capabilities.VolumeModes(class, env.Spec.CapabilityOverrides); !m.Allows(spec.VolumeMode) {
		return Spec{}, &fault.Error{Kind: fault.FailedPrecondition, Field: hints + "volume_mode",
			Detail: fmt.Sprintf("storage class %s does not support %s; it supports %s", class.Name, spec.VolumeMode, strings.Join(m.Supported, ", "))}
	}
	return spec, nil
}

// storageClass finds the named class, or the cluster's default when name is
// empty.
func storageClass(cluster clusters.Live, name string) (*storagev1.StorageClass, error) {
	const field = "spec.provider_hints.kubernetes.storage_class"
	if name == "" {
		class, ok := cluster.DefaultStorageClass()
		if !ok {
			return nil, &fault.Error{Kind: fault.FailedPrecondition, Field: field,
				Detail: "is required: neither the environment nor the cluster has a default storage class"}
		}
		return class, nil
	}
	class, ok := cluster.StorageClass(name)
	if !ok {
		return nil, &fault.Error{Kind: fault.FailedPrecondition, Field: field, Detail: fmt.Sprintf("storage class %s does not exist in the cluster", name)}
	}
	return class, nil
}

// fromClaim is the volume as its claim shows it.
func (s *Service) fromClaim(cluster clusters.Live, rec record, pvc *corev1.PersistentVolumeClaim) Volume {
	st, msg, _ := status.OfClaim(cluster, pvc)
	v := Volume{
		ID: rec.ID, EnvironmentID: rec.EnvironmentID, Spec: specOf(pvc), VolumeName: pvc.Spec.VolumeName,
		Status: st, Message: msg, CreateTime: rec.CreateTime, UpdateTime: rec.UpdateTime, Tier: tierOf(cluster, pvc),
	}
	return withPendingWrites(v, rec, pvc)
}

// withPendingWrites lets the gateway's own recent writes win over a cache
// that has not caught up with them: a requested deletion or expansion shows
// at once.
func withPendingWrites(v Volume, rec record, pvc *corev1.PersistentVolumeClaim) Volume {
	if rec.Status == status.Deleting && pvc.DeletionTimestamp == nil {
		v.Status, v.Message = status.Deleting, "the claim is being deleted"
		return v
	}
	want, err1 := resource.ParseQuantity(rec.Spec.Capacity)
	have, err2 := resource.ParseQuantity(v.Spec.Capacity)
	if err1 == nil && err2 == nil && want.Cmp(have) > 0 {
		v.Spec.Capacity = rec.Spec.Capacity
		v.Status, v.Message = status.Provisioning, "expansion to "+rec.Spec.Capacity+" requested"
	}
	return v
}

// fromRecord is the volume while its claim is not (or no longer) visible.
func fromRecord(rec record) Volume {
	return Volume{ID: rec.ID, EnvironmentID: rec.EnvironmentID, Spec: rec.Spec, Status: rec.Status,
		Message: rec.Message, CreateTime: rec.CreateTime, UpdateTime: rec.UpdateTime, VolumeName: rec.VolumeName}
}

// Writable returns the environment's cluster if writes can reach it now,
// and this replica's lease on it (see Readable).
func (s *Service) Writable(envID string) (clusters.Live, membership.Lease, error) {
	cluster, lease, err := s.Readable(envID)
	if err != nil {
		return nil, lease, err
	}
	if h := cluster.Health(); h.State == clusters.HealthUnreachable {
		return nil, lease, fault.RetryLater(5*time.Second, "environment %s is unreachable: %s", envID, h.Message)
	}
	return cluster, lease, nil
}

// Readable returns the environment's cluster if this replica owns the
// environment and its caches can answer, with the lease it holds: taken
// once, where a use case starts, and handed down to every write the use
// case makes, so they are all fenced by the one ownership the use case
// began under (a lapse and regain meanwhile refuses them).
func (s *Service) Readable(envID string) (clusters.Live, membership.Lease, error) {
	lease, err := s.leases.Lease(envID)
	if err != nil {
		return nil, lease, err
	}
	cluster, ok := s.clusters.Live(envID)
	if !ok || !cluster.Health().Synced {
		return nil, lease, fault.RetryLater(time.Second, "environment %s is not connected yet; retry shortly", envID)
	}
	return cluster, lease, nil
}

func first(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("volumes: marshal %T: %v", v, err))
	}
	return b
}
