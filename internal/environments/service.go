package environments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// Service implements the registry's use cases and publishes its changes.
type Service struct {
	repo repository
	// keys is swapped whole by ReplaceKeys (SIGHUP), never mutated.
	keys          atomic.Pointer[secrets.KeyRing]
	prober        *clusters.Prober
	allowInsecure bool
	log           *slog.Logger
	changes       changes.Topic[Change]
	// watching is set once Watch has read the registry.
	watching atomic.Bool
	// generations is each environment's highest credential generation this
	// process has opened or written (see open).
	generations sync.Map
	// verifies makes concurrent :verify calls of one environment share one
	// probe: a hundred clicks are one probe's worth of requests to the
	// cluster.
	verifies singleflight.Group
	// specs holds the specs volume writes read (id → VersionedSpec); see
	// Spec.
	specs sync.Map
	// registered holds the revision of each row this replica registered
	// and published, until its Watch reads that row: a registration is
	// then not published a second time, which would have every follower
	// read the row again (id → revision).
	registered sync.Map
}

// Change is a notice the registry publishes after an environment was
// registered, updated or deleted (by this replica; others' changes are
// found by periodic re-reads).
type Change struct {
	EnvironmentID string
	// Registered is set for an environment this replica's registry did
	// not hold before: the one change that moves ownership at once.
	Registered bool
	// Deleted is set for a deletion; DCMProviderID is then the provider
	// the environment was last registered as in DCM, if any.
	Deleted       bool
	DCMProviderID string
}

// Subscribe returns a subscription to the registry's changes; its owner
// runs it (changes.Subscription.Run).
func (s *Service) Subscribe() *changes.Subscription[Change] { return s.changes.Subscribe() }

// New returns the registry over db and keys as the operator's settings
// configure it: the egress policy, probe timeout and concurrency, and
// whether clusters without TLS verification are accepted. It is the
// registry's one constructor — the gateway, the offline key commands and
// the tests build it here. limiters, when set, are the per-environment rate
// limiters the cluster pool uses too (nil for offline tools).
func New(cfg config.Config, db *pgxpool.Pool, keys *secrets.KeyRing, limiters *clusters.Limiters, logger *slog.Logger) *Service {
	s := &Service{
		repo: repository{db: db},
		prober: clusters.NewProber(clusters.ProberOptions{
			Client:      clusters.ClientOptions{Egress: cfg.EgressPolicy()},
			Timeout:     cfg.ProbeTimeout,
			Limiters:    limiters,
			Concurrency: cfg.ProbeConcurrency,
		}),
		allowInsecure: cfg.AllowInsecureClusters,
		log:           logger,
	}
	s.keys.Store(keys)
	return s
}

// Register adds an environment after probing it. An identical replay of an
// earlier registration by the same subject returns the stored environment
// with created=false; the same id with a different spec or credentials, or
// registered by someone else, is AlreadyExists.
func (s *Service) Register(ctx context.Context, reg Registration) (env Environment, created bool, err error) {
	if err := ValidateID(reg.ID); err != nil {
		return Environment{}, false, err
	}
	conn, namespace, err := s.resolveCredentials(reg.Credentials)
	if err != nil {
		return Environment{}, false, err
	}
	spec := reg.Spec
	if spec.Namespace == "" {
		spec.Namespace = namespace
	}
	spec.normalize(reg.ID)
	if err := spec.validate(); err != nil {
		return Environment{}, false, err
	}

	existing, err := s.repo.get(ctx, reg.ID)
	switch {
	case err == nil:
		return s.replay(ctx, existing, reg, spec, conn)
	case !errors.Is(err, errNotFound):
		return Environment{}, false, err
	}

	result := s.prober.Probe(ctx, reg.ID, conn, spec.Namespaces())
	if result.State != clusters.HealthReady {
		return Environment{}, false, probeFailed(result)
	}
	result = expiring(result, expiryOf(conn), reg.ID, conn)
	rec, err := s.newRecord(ctx, reg, spec, conn, result)
	if err != nil {
		return Environment{}, false, err
	}
	stored, err := s.repo.insert(ctx, rec, admitNeighbours(spec))
	if errors.Is(err, errExists) {
		// A concurrent registration of the same id won the race.
		existing, err := s.repo.get(ctx, reg.ID)
		if err != nil {
			return Environment{}, false, err
		}
		return s.replay(ctx, existing, reg, spec, conn)
	} else if err != nil {
		return Environment{}, false, err
	}
	s.sawGeneration(rec.ID, rec.sealed.Generation)
	s.audit(ctx, "environment registered", rec.ID, "server", conn.Server, "auth_type", conn.AuthType(), "state", result.State,
		"share_namespaces", spec.ShareNamespaces)
	s.registered.Store(rec.ID, stored.revision())
	s.publish(Change{EnvironmentID: rec.ID, Registered: true})
	return stored.Environment, true, nil
}

// replay compares a repeated registration with the stored one. Credentials
// are compared only for the subject that registered the environment (who
// knows them anyway): for anyone else the answer is the same 409 whatever
// was sent, so a registration cannot test guessed credentials.
func (s *Service) replay(ctx context.Context, existing record, reg Registration, spec Spec, conn kubeconfig.Connection) (Environment, bool, error) {
	exists := &fault.Error{Kind: fault.AlreadyExists, Field: "id",
		Detail: "an environment with this id exists with a different specification or credentials, or was registered by someone else"}
	if existing.registeredBy != reg.RegisteredBy || !reflect.DeepEqual(existing.Spec, spec) {
		return Environment{}, false, exists
	}
	stored, err := s.open(ctx, existing)
	if err != nil {
		return Environment{}, false, err
	}
	if !stored.Equal(conn) {
		return Environment{}, false, exists
	}
	return existing.Environment, false, nil
}

// admitNeighbours refuses an environment of spec on a cluster where
// another environment serves one of its namespaces, naming that
// environment and the namespace — two environments on one namespace
// would each meet the other's claims — unless spec says to share them
// (ShareNamespaces): each then serves only the claims it made.
func admitNeighbours(spec Spec) func([]neighbour) error {
	return func(others []neighbour) error {
		if spec.ShareNamespaces {
			return nil
		}
		for _, other := range others {
			for _, ns := range spec.Namespaces() {
				if !slices.Contains(other.Namespaces, ns) {
					continue
				}
				field := "allowed_namespaces"
				if ns == spec.Namespace {
					field = "namespace"
				}
				return &fault.Error{Kind: fault.Conflict, Field: field, Detail: fmt.Sprintf(
					"namespace %s of this cluster is served by environment %q already; to serve it from both, "+
						"each seeing only the claims it made, set share_namespaces (env add --share-namespace)", ns, other.ID)}
			}
		}
		return nil
	}
}

// Get returns one environment.
func (s *Service) Get(ctx context.Context, id string) (Environment, error) {
	rec, err := s.get(ctx, id)
	return rec.Environment, err
}

func (s *Service) get(ctx context.Context, id string) (record, error) {
	rec, err := s.repo.get(ctx, id)
	if errors.Is(err, errNotFound) {
		return record{}, notFound(id)
	}
	return rec, err
}

// VersionedSpec is an environment's spec and the generation it was read
// at (every update of the environment raises the generation).
type VersionedSpec struct {
	Spec       Spec
	Generation int64
}

// Spec returns an environment's spec alone: what a volume write needs of
// it, read without what Get adds — the credentials and the counts of the
// environment's volumes, which a create would otherwise pay for in
// proportion to the volumes the environment holds.
//
// It is served from memory after the first read, so a create spends no
// round trip on it: the write that depends on the spec states the
// generation it was decided under (GenerationSQL), and when the row has
// moved on the writer asks AtGeneration, which drops the spec, and decides
// again on a fresh read. A stale spec therefore never decides a write,
// however long it stays here.
func (s *Service) Spec(ctx context.Context, id string) (VersionedSpec, error) {
	if v, ok := s.specs.Load(id); ok {
		return v.(VersionedSpec), nil
	}
	v, err := s.repo.getSpec(ctx, id)
	if errors.Is(err, errNotFound) {
		return VersionedSpec{}, notFound(id)
	}
	if err == nil {
		s.specs.Store(id, v)
	}
	return v, err
}

// forget drops the spec Spec holds of an environment: the next Spec reads
// the row.
func (s *Service) forget(id string) { s.specs.Delete(id) }

// publish tells the subscribers of a change, dropping the spec Spec holds
// of the environment first: a change this replica made, or one its Watch
// found, is not left for a write to find stale.
func (s *Service) publish(c Change) {
	s.forget(c.EnvironmentID)
	s.changes.Publish(c)
}

// GenerationSQL is the condition a write depending on an environment's
// spec adds to its statement: the environment is still at the generation
// the spec was read at (id and generation are SQL expressions).
func GenerationSQL(id, generation string) string {
	return `EXISTS (SELECT 1 FROM environments g WHERE g.id = ` + id + ` AND g.generation = ` + generation + `)`
}

// AtGeneration reports whether the environment is still at generation —
// the cause a write conditioned by GenerationSQL needs when it wrote
// nothing, which the same statement cannot tell apart from a lost lease —
// and, when it is not, drops the spec Spec holds of it.
func (s *Service) AtGeneration(ctx context.Context, id string, generation int64) (bool, error) {
	current, err := s.repo.atGeneration(ctx, id, generation)
	if err == nil && !current {
		s.forget(id)
	}
	return current, err
}

// Exists returns a NotFound fault naming the first of ids that is not
// registered: for callers that need nothing else of them, without reading
// the rows.
func (s *Service) Exists(ctx context.Context, ids ...string) error {
	missing, err := s.repo.firstMissing(ctx, ids)
	if err == nil && missing != "" {
		err = notFound(missing)
	}
	return err
}

func notFound(id string) error { return fault.New(fault.NotFound, "environment %q not found", id) }

// verifyTimeout bounds one shared :verify: waiting for a probe slot, the
// probe, and recording its result.
const verifyTimeout = 2 * time.Minute

// Verify probes the environment now and records the result. Concurrent
// calls for one environment share one probe, which serves every caller
// waiting for it and so does not end with the first one's request (it has
// its own bound); each caller stops waiting when its own context ends. The
// answer is shared by the callers, which only read it.
func (s *Service) Verify(ctx context.Context, id string) (Environment, error) {
	done := s.verifies.DoChan(id, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), verifyTimeout)
		defer cancel()
		rec, err := s.get(ctx, id)
		if err != nil {
			return Environment{}, err
		}
		if err := s.probeAndRecord(ctx, rec, nil); err != nil {
			return Environment{}, err
		}
		return s.Get(ctx, id)
	})
	select {
	case r := <-done:
		env, _ := r.Val.(Environment)
		return env, r.Err
	case <-ctx.Done():
		return Environment{}, ctx.Err()
	}
}

// probeAndRecord probes with the stored credentials and saves the status; a
// result for settings that changed meanwhile is dropped. Credentials that
// cannot be used are a status too, so an admin sees them and rotates.
//
// The credentials' expiry is recorded too where none is: credentials stored
// before the gateway read expiries get theirs (and its metric) at the next
// probe. A probe the owner runs on its own carries its claim (an admin's
// :verify carries none): its result is dropped if the claim is no longer
// current.
func (s *Service) probeAndRecord(ctx context.Context, rec record, lease *membership.Lease) error {
	_, err := s.probeAndRecordStatus(ctx, rec, lease)
	return err
}

// probeAndRecordStatus is probeAndRecord, returning the status stored
// now: the probe's, or rec's when the row changed meanwhile.
func (s *Service) probeAndRecordStatus(ctx context.Context, rec record, lease *membership.Lease) (Status, error) {
	result, expiry := s.probeStored(ctx, rec)
	st := statusFrom(rec.Status, result)
	recorded, err := s.repo.updateStatus(ctx, rec.ID, rec.generation, st, expiry, lease)
	if err != nil || !recorded {
		return rec.Status, err
	}
	if st.State != rec.Status.State {
		s.log.InfoContext(ctx, "environment state changed", "environment", rec.ID,
			"from", rec.Status.State, "to", st.State, "message", st.Message)
	}
	return st, nil
}

// probeStored probes with the stored credentials; expiry is when they
// expire (nil when they say nothing, or could not be opened).
func (s *Service) probeStored(ctx context.Context, rec record) (result clusters.ProbeResult, expiry *time.Time) {
	refused := clusters.ProbeResult{State: clusters.HealthUnauthorized, Time: now()}
	if rec.Connection.Insecure && !s.allowInsecure {
		refused.State = clusters.HealthUnreachable
		refused.Message = "TLS verification is off for this environment but SG_ALLOW_INSECURE_CLUSTERS is not set; rotate its credentials"
		return refused, nil
	}
	conn, err := s.open(ctx, rec)
	if errors.Is(err, errChangedMeanwhile) {
		// Rotated since rec was read: this result is for old settings and
		// will not be recorded (the generation moved).
		return refused, nil
	}
	if err != nil {
		s.log.ErrorContext(ctx, "stored credentials unusable", "environment", rec.ID, "error", err)
		refused.Message = "the stored credentials cannot be used (see the gateway log); rotate them"
		return refused, nil
	}
	expiry = expiryOf(conn)
	return expiring(s.prober.Probe(ctx, rec.ID, conn, rec.Spec.Namespaces()), expiry, rec.ID, conn), expiry
}

// expiryWarning is how long before its credentials expire an environment
// turns DEGRADED: time for an admin to rotate them.
const expiryWarning = 7 * 24 * time.Hour

// expiryOf is when conn's credentials expire, nil when they do not say.
func expiryOf(conn kubeconfig.Connection) *time.Time {
	if at, ok := conn.CredentialsExpiry(); ok {
		return &at
	}
	return nil
}

// expiring turns a READY probe result DEGRADED when the credentials of
// environment id (conn, which expire at expiry, from expiryOf) expire
// within expiryWarning, saying when and what to do. The environment keeps
// serving (DEGRADED is a problem to fix, not an outage); the cluster
// itself refuses the credentials once they have expired (UNAUTHORIZED).
func expiring(r clusters.ProbeResult, expiry *time.Time, id string, conn kubeconfig.Connection) clusters.ProbeResult {
	if expiry == nil || r.State != clusters.HealthReady || expiry.Sub(r.Time) > expiryWarning {
		return r
	}
	r.State = clusters.HealthDegraded
	r.Message = fmt.Sprintf("the credentials expire at %s (in %s); %s",
		expiry.Format(time.RFC3339), max(expiry.Sub(r.Time), 0).Round(time.Minute), rotateHint(id, conn))
	return r
}

// BootstrapSubject is who the tokens `env bootstrap` mints are for: its
// ServiceAccount (deploy/target-cluster; a test there keeps the two equal).
const BootstrapSubject = "system:serviceaccount:storage-gateway:storage-gateway"

// rotateHint says how to rotate conn's credentials: a token bootstrap
// minted is rotated by bootstrap (it mints the next one), anything else
// with env rotate and new credentials.
func rotateHint(id string, conn kubeconfig.Connection) string {
	if conn.TokenSubject() == BootstrapSubject {
		return "mint a new token with `storage-gateway env bootstrap " + id + " --rotate --kubeconfig ADMIN_KUBECONFIG`"
	}
	return "rotate them with `storage-gateway env rotate " + id + "` and new credentials"
}

// Delete forgets an environment. It refuses while volume records exist unless
// force is set; PVCs in the cluster are never touched.
func (s *Service) Delete(ctx context.Context, id string, force bool) error {
	volumes, reg, err := s.repo.delete(ctx, id, force)
	if errors.Is(err, errNotFound) {
		return notFound(id)
	}
	if err != nil {
		return err
	}
	if volumes > 0 && !force {
		return fault.New(fault.Conflict, "environment %q still has %d volume(s); delete them first, or use force=true to forget them (their PVCs stay in the cluster)", id, volumes)
	}
	s.registered.Delete(id) // if the watch never read the row
	s.publish(Change{EnvironmentID: id, Deleted: true, DCMProviderID: reg.ProviderID})
	s.audit(ctx, "environment deleted", id, "force", force, "forgotten_volumes", volumes)
	return nil
}

// RecordRegistration stores the state of an environment's DCM registration,
// made by the owner holding claim; a claim no longer current records
// nothing and says so (membership.ErrNotOwner).
func (s *Service) RecordRegistration(ctx context.Context, id string, reg DCMRegistration, lease membership.Lease) error {
	recorded, err := s.repo.recordRegistration(ctx, id, reg, lease)
	if err == nil && !recorded {
		err = lease.Lost()
	}
	return err
}

// probeFailed is the 422 for a registration or update whose probe failed.
func probeFailed(r clusters.ProbeResult) error {
	return fault.New(fault.FailedPrecondition, "cluster probe failed (%s): %s", r.State, r.Message)
}

// statusFrom folds a probe result into the previous status.
func statusFrom(prev Status, r clusters.ProbeResult) Status {
	st := prev
	st.State, st.Message = stateOf(r.State), r.Message
	// A cluster that answered (READY) said which version it runs, or gave
	// none worth keeping; one that did not keeps its last known version.
	if r.KubernetesVersion != "" || r.State == clusters.HealthReady {
		st.KubernetesVersion = r.KubernetesVersion
	}
	if r.StorageClassCount != nil {
		st.StorageClassCount = r.StorageClassCount
	}
	if r.ClusterID != "" {
		st.ClusterID = r.ClusterID
	}
	t := r.Time
	st.LastProbeTime = &t
	if r.State == clusters.HealthReady {
		st.LastReadyTime = &t
	}
	return st
}

// audit logs an admin action: what and to which environment, never secrets.
func (s *Service) audit(ctx context.Context, msg, id string, attrs ...any) {
	s.log.InfoContext(ctx, msg, append([]any{"audit", true, "environment", id}, attrs...)...)
}
