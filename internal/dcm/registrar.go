package dcm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	spmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/provider"
	spmclient "github.com/dcm-project/service-provider-manager/pkg/client/provider"
	rmclient "github.com/dcm-project/service-provider-manager/pkg/client/resource_manager"
	"github.com/google/uuid"
	"k8s.io/client-go/util/workqueue"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/controller"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
)

// Clusters are what the registrar asks of the cluster pool (a
// *clusters.Pool).
type Clusters interface {
	TotalStorage(environmentID string) (string, bool)
	ReadyAndSynced(environmentID string) bool
	Subscribe() *changes.Subscription[clusters.Change]
}

// Registration states recorded in an environment's status.dcm_registration.
// StateOff is never recorded: the API reports it for an environment that is
// not registered because registration is off (for it, or on the gateway).
const (
	StateRegistered = "REGISTERED"
	StatePending    = "PENDING"
	StateFailed     = "FAILED"
	StateOff        = "OFF"
)

// requestTimeout bounds one call to DCM.
const requestTimeout = 10 * time.Second

// Options configure a Registrar.
type Options struct {
	// URL is DCM's service-provider-manager API, e.g. http://dcm:8080/api/v1alpha1.
	URL string
	// PublicURL is where DCM reaches the gateway.
	PublicURL    string
	Environments *environments.Service
	// Interval renews every registration (DCM's name-keyed create is
	// idempotent), so a DCM that lost its state learns it again.
	Interval time.Duration
	Logger   *slog.Logger
	// Clusters, if set, gives each environment's published storage capacity
	// (metadata.resources.total_storage), and a cluster that becomes ready
	// and synced wakes the registrar to publish it.
	Clusters Clusters
	// Credentials authenticate the calls to DCM (none by default).
	Credentials Credentials
	// Owned are the environments this replica registers: each is
	// registered by its owner alone, and a hand-over has the new owner
	// register it at once.
	Owned membership.Ownership
	// Served says which of DCM's instance ids an environment serves (a live
	// volume record) and which an adoption would take (a valid labelled
	// claim in one of its namespaces): a provider name is taken over only
	// when it serves every instance DCM holds under it.
	Served func(ctx context.Context, environmentID string, ids []string) (recorded, adoptable map[string]bool, err error)
	// CheckInterval is how often each registered provider is read back from
	// DCM, so a provider name another endpoint took is taken back within
	// it (default 30 s).
	CheckInterval time.Duration
	// Audit records what the registrar does on its own: taking a provider
	// name back.
	Audit *auth.AuditLog
	// Repeat queues a volume's status again unless heard, DCM's record of
	// it, says that status already (see records.go); required.
	Repeat func(ctx context.Context, environmentID, volumeID, heard string) (bool, error)
}

// Registrar keeps every environment with dcm.register that this replica
// owns registered. Registering is a reconciler (internal/controller) keyed
// by environment: one is looked at when it is registered, updated, deleted
// (its provider leaves DCM), gained, when its cluster becomes ready and
// synced (its capacity is known then), and again when its renewal, its
// read-back from DCM or a retry is due. DCM's refusals it may accept later
// (5xx, 429, no answer) are retried with the queue's backoff, no sooner
// than a Retry-After asks. Deregistering runs on the same key, so a
// registration that read the environment before it was deleted can never
// land after its deregistration.
type Registrar struct {
	opts      Options
	client    *spmclient.ClientWithResponses
	instances *rmclient.ClientWithResponses
	log       *slog.Logger

	registrations *controller.Controller
	// records reads back DCM's records of the volumes DCM created.
	records *controller.Controller

	// listing is DCM's provider listing the passes share (see listed).
	listing providerListing

	mu    sync.Mutex
	state map[string]*registration
	// forgotten are the providers of deleted environments this replica
	// registered, which leave DCM at their environment's next reconcile.
	forgotten map[string]string
}

// passing returns the environment's registration, held for this pass:
// passes over one environment — the reconciler's and an admin's (Refresh)
// — exclude each other, and an admin's waits no longer than its ctx.
func (r *Registrar) passing(ctx context.Context, id string) (*registration, func(), error) {
	r.mu.Lock()
	reg := r.state[id]
	if reg == nil {
		reg = &registration{pass: make(chan struct{}, 1)}
		r.state[id] = reg
	}
	r.mu.Unlock()
	select {
	case reg.pass <- struct{}{}:
		return reg, func() { <-reg.pass }, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// registration is what the registrar knows about one environment.
type registration struct {
	// pass holds a token while a pass over the environment is under way.
	pass        chan struct{}
	fingerprint string    // of the last body DCM accepted or refused for good
	done        time.Time // when that happened
	// providerID is the provider DCM answered with, kept for deregistering:
	// an environment deleted while its registration was in flight has no
	// provider id in its row.
	providerID string
	// checked is when DCM's provider of the name was last read back.
	checked time.Time
}

// errPending is a registration DCM may accept later (it answered 5xx or
// 429, or did not answer): the reconciler retries it with backoff.
var errPending = errors.New("DCM registration pending")

// asked is what an admin asks of a pass (Refresh): again registers the
// environment even when nothing changed (a verify or update); force takes
// the name over even from a provider with instances the environment
// cannot serve (the admin's decision, audited). The reconciler asks neither.
type asked struct{ again, force bool }

// New returns a Registrar; Run starts it.
func New(opts Options) (*Registrar, error) {
	httpClient, err := opts.Credentials.httpClient()
	if err != nil {
		return nil, err
	}
	client, err := spmclient.NewClientWithResponses(strings.TrimRight(opts.URL, "/"), spmclient.WithHTTPClient(httpClient))
	if err != nil {
		return nil, err
	}
	instances, err := rmclient.NewClientWithResponses(strings.TrimRight(opts.URL, "/"), rmclient.WithHTTPClient(httpClient))
	if err != nil {
		return nil, err
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = 30 * time.Second
	}
	if opts.Served == nil || opts.Repeat == nil {
		return nil, errors.New("dcm: Options.Served and Options.Repeat are required")
	}
	r := &Registrar{opts: opts, client: client, instances: instances, log: opts.Logger.With("component", "dcm"),
		state: map[string]*registration{}, forgotten: map[string]string{}}
	r.registrations = controller.New(controller.Options{Name: "dcm registrar", Logger: r.log, Reconcile: r.reconcile,
		List: opts.Environments.IDs,
		// A deleted environment's provider leaves DCM through the replica
		// that registered it, which may no longer own the deleted row.
		Owns:        func(id string) bool { return opts.Owned.Owns(id) || r.forgetting(id) },
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute)})
	controller.Watch(r.registrations, opts.Environments.Subscribe(), func(c environments.Change) []string {
		if c.Deleted {
			r.forget(c.EnvironmentID, c.DCMProviderID)
		}
		return []string{c.EnvironmentID}
	})
	controller.Watch(r.registrations, opts.Owned.Subscribe(), func(c membership.Change) []string {
		if !opts.Owned.Owns(c.EnvironmentID) {
			r.lost(c.EnvironmentID) // a later hand-over back registers it at once
		}
		return []string{c.EnvironmentID}
	})
	if opts.Clusters != nil {
		controller.Watch(r.registrations, opts.Clusters.Subscribe(), func(c clusters.Change) []string {
			// The capacity it publishes is known now.
			if c.Kind == clusters.HealthChanged && opts.Clusters.ReadyAndSynced(c.EnvironmentID) {
				return []string{c.EnvironmentID}
			}
			return nil
		})
	}
	r.records = r.newRecordChecks()
	return r, nil
}

// forget has a deleted environment's provider leave DCM if this replica
// was registering it: at its next reconcile — after a pass in flight, whose
// answer may name the provider the row never learned — as DCM answered it,
// else as the row last named it.
func (r *Registrar) forget(id, providerID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state[id] != nil {
		r.forgotten[id] = providerID
	}
}

func (r *Registrar) forgetting(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.forgotten[id]
	return ok
}

// lost drops what the registrar knows of an environment it no longer owns,
// unless its deletion is pending: its deregistration needs the provider
// DCM answered with.
func (r *Registrar) lost(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, deleted := r.forgotten[id]; !deleted {
		delete(r.state, id)
	}
}

// Refresh registers env again now, whatever the registrar last did — an
// admin's verify or update asks for it — and, with force, takes its
// provider name over even when DCM holds instances of it the environment
// cannot serve (the admin's decision; the request is audited). It returns
// once the pass is done; the environment's status shows its outcome. Only
// the environment's owner registers it.
func (r *Registrar) Refresh(ctx context.Context, env environments.Environment, force bool) error {
	if !env.Spec.DCM.Register {
		return nil
	}
	lease, err := r.opts.Owned.Lease(env.ID)
	if err != nil {
		return err
	}
	_, err = r.ensure(ctx, env, lease, asked{again: true, force: force})
	if errors.Is(err, errPending) {
		return nil // recorded in its status, and retried by the reconciler
	}
	return err
}

// Started reports whether the registrar's reconcilers run (readiness).
func (r *Registrar) Started() bool { return r.registrations.Started() && r.records.Started() }

// Run registers, deregisters and checks created volumes' records in DCM
// until ctx ends.
func (r *Registrar) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.records.Run(ctx) })
	wg.Go(func() { r.registrations.Run(ctx) })
}

// reconcile deregisters environment id's provider if it was deleted, and
// registers it as ensure says if it is registered, owned here and set to
// register; it asks for another look when ensure says one is due.
func (r *Registrar) reconcile(ctx context.Context, id string) (time.Duration, error) {
	r.mu.Lock()
	providerID, deleted := r.forgotten[id]
	delete(r.forgotten, id)
	if reg := r.state[id]; deleted && reg != nil && reg.providerID != "" {
		providerID = reg.providerID
	}
	if deleted {
		delete(r.state, id)
	}
	r.mu.Unlock()
	if deleted && providerID != "" {
		r.deregister(ctx, id, providerID)
	}
	env, err := r.opts.Environments.Get(ctx, id)
	switch {
	case fault.Is(err, fault.NotFound):
		r.lost(id)
		return 0, nil
	case err != nil:
		return 0, err
	}
	lease, err := r.opts.Owned.Lease(id)
	if err != nil {
		r.lost(id)
		return 0, nil // handed over: its new owner registers it
	}
	if !env.Spec.DCM.Register {
		return 0, nil
	}
	next, err := r.ensure(ctx, env, lease, asked{})
	if err != nil {
		return 0, err
	}
	return max(time.Until(next), time.Millisecond), nil
}

// ensure registers env if its registration is missing, changed, due for
// renewal or asked for again, reads its provider back from DCM every
// CheckInterval, and returns when it next needs attention; a registration
// DCM may accept later is errPending (in a controller.RetryAfter when DCM
// asked for a delay). A provider name another endpoint holds is taken back
// at once when the gateway held it before, and taken over only when env
// serves every instance DCM holds under it (or an admin forces it).
func (r *Registrar) ensure(ctx context.Context, env environments.Environment, lease membership.Lease, ask asked) (time.Time, error) {
	reg, done, err := r.passing(ctx, env.ID)
	if err != nil {
		return time.Now(), err
	}
	defer done()
	body := r.provider(env)
	fp := fingerprint(body)
	r.mu.Lock()
	now := time.Now()
	renew := reg.fingerprint != fp || now.Sub(reg.done) >= r.opts.Interval || ask.again || ask.force
	check := now.Sub(reg.checked) >= r.opts.CheckInterval
	known := reg.providerID
	r.mu.Unlock()
	if !renew && !check {
		return r.next(reg), nil
	}
	if known == "" {
		known = env.Status.DCMRegistration.ProviderID
	}

	o := r.pass(ctx, env, body, env.Status.DCMRegistration, known, renew, ask.force)
	r.mu.Lock()
	reg.checked = time.Now()
	r.mu.Unlock()
	if o.skip {
		return r.next(reg), nil
	}
	// Recorded even when the caller stopped waiting (an admin's request
	// times out): DCM has answered, and the reconciler must not think
	// otherwise.
	if r.record(context.WithoutCancel(ctx), env.ID, o, lease) && o.ProviderID != "" && r.deletedMeanwhile(ctx, env.ID) {
		// Deleted while DCM was answering: the provider it answered
		// with leaves at once. The deletion's notice may also have
		// reached the registrar, or not yet (it races the loss of the
		// environment's ownership, which drops what the registrar knew);
		// either way nothing else knows this provider id.
		r.deregister(context.WithoutCancel(ctx), env.ID, o.ProviderID)
		return time.Now(), nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o.State {
	case StatePending:
		return time.Time{}, &controller.RetryAfter{After: o.retryAfter, Err: fmt.Errorf("%w: %s", errPending, o.Message)}
	case StateBlocked:
		// Looked at again at the next check: once the environment serves
		// every instance, the take-over goes ahead.
		reg.fingerprint = ""
		return reg.checked.Add(r.opts.CheckInterval), nil
	}
	reg.fingerprint, reg.done = fp, time.Now()
	if o.ProviderID != "" {
		reg.providerID = o.ProviderID
	}
	return r.next(reg), nil
}

// next is when reg next needs a pass: its renewal or its read-back.
func (r *Registrar) next(reg *registration) time.Time {
	return earliest(reg.done.Add(r.opts.Interval), reg.checked.Add(r.opts.CheckInterval))
}

// pass looks at who holds env's provider name in DCM and registers as that
// says: at once when another endpoint took a name the gateway held, after
// the pre-check when it is another provider's name, when renew is due
// otherwise. Its outcome carries prev's history forward; skip means
// nothing needed doing.
func (r *Registrar) pass(ctx context.Context, env environments.Environment, body spmapi.Provider, prev environments.DCMRegistration,
	known string, renew, force bool) outcome {
	holder, err := r.holder(ctx, body.Name, known)
	if err != nil {
		r.log.WarnContext(ctx, "read the provider back from DCM", "environment", env.ID, "error", err)
		return outcome{DCMRegistration: carried(prev, StatePending, "DCM unreachable; retrying")}
	}
	now := time.Now().UTC()
	ours := holder != nil && holder.Endpoint == body.Endpoint
	// DCM's instances the environment has no claim for, once counted in
	// this pass (the take-over's pre-check counts them).
	var without []Instance
	counted := false
	switch {
	case holder != nil && !ours && heldBefore(prev, holder):
		// Another endpoint registered the name the gateway held (DCM's
		// storage SP starting again): take it back now.
		since := now
		if prev.DisplacedBy == holder.Endpoint && prev.DisplacedTime != nil {
			since = *prev.DisplacedTime
		}
		r.log.WarnContext(ctx, "DCM provider name held by another endpoint: registering it again", "environment", env.ID,
			"provider", body.Name, "endpoint", holder.Endpoint, "since", since)
		o := r.register(ctx, body)
		o.DCMRegistration = merged(prev, o.DCMRegistration)
		o.DisplacedBy, o.DisplacedTime = holder.Endpoint, &since
		if o.State == StateRegistered {
			o.ReclaimTime = &now
			o.Message = fmt.Sprintf("registered as %s; the name was held by %s from %s until %s", body.Name, holder.Endpoint,
				since.Format(time.RFC3339), now.Format(time.RFC3339))
		}
		r.audit(ctx, env.ID, o)
		return o
	case holder != nil && !ours && !force:
		var unadopted []Instance
		var err error
		without, unadopted, err = r.coverage(ctx, env)
		counted = err == nil
		if err != nil {
			r.log.WarnContext(ctx, "list DCM's instances of the provider", "environment", env.ID, "error", err)
			return outcome{DCMRegistration: carried(prev, StatePending, "cannot list DCM's instances of "+body.Name+"; retrying")}
		}
		if len(without)+len(unadopted) > 0 {
			reg := withInstances(carried(prev, StateBlocked, blocked(env, *holder, without, unadopted)), without, now)
			return outcome{DCMRegistration: reg}
		}
	case ours && !renew:
		return outcome{skip: true}
	}
	o := r.register(ctx, body)
	o.DCMRegistration = merged(prev, o.DCMRegistration)
	if o.State != StateRegistered {
		return o
	}
	// The count of instances the environment cannot serve, kept current
	// with each registration.
	if !counted {
		var err error
		without, _, err = r.coverage(ctx, env)
		counted = err == nil
	}
	if counted {
		o.DCMRegistration = withInstances(o.DCMRegistration, without, now)
	}
	return o
}

// holder is DCM's provider of the name: the one registered as known (the
// id the gateway registered), else found by listing DCM's storage
// providers (DCM offers no lookup by name); nil when DCM has none.
func (r *Registrar) holder(ctx context.Context, name, known string) (*spmapi.Provider, error) {
	if known != "" {
		p, err := r.providerOf(ctx, known)
		if err != nil || p != nil && p.Name == name {
			return p, err
		}
	}
	listing, err := r.listed(ctx)
	if err != nil {
		return nil, err
	}
	if p, ok := listing[name]; ok {
		return &p, nil
	}
	return nil, nil
}

// heldBefore reports whether the gateway held holder's name: DCM accepted a
// registration of the gateway's as holder's provider (a provider id is
// recorded only from DCM's acceptance, and kept through later failures).
func heldBefore(prev environments.DCMRegistration, holder *spmapi.Provider) bool {
	return holder.Id != nil && prev.ProviderID == *holder.Id
}

// carried is prev in a new state, its history kept.
func carried(prev environments.DCMRegistration, state, message string) environments.DCMRegistration {
	prev.State, prev.Message = state, message
	return prev
}

// merged is a registration attempt's result over prev's history.
func merged(prev, now environments.DCMRegistration) environments.DCMRegistration {
	out := carried(prev, now.State, now.Message)
	if now.ProviderID != "" {
		out.ProviderID = now.ProviderID
	}
	return out
}

// audit records a take-back in the audit trail, as the gateway's own act.
func (r *Registrar) audit(ctx context.Context, environmentID string, o outcome) {
	if r.opts.Audit == nil {
		return
	}
	code := http.StatusOK
	if o.State != StateRegistered {
		code = http.StatusServiceUnavailable
	}
	// A failure is logged; the take-back stands.
	_ = r.opts.Audit.Record(ctx, auth.AuditEvent{RequestID: uuid.NewString(), Subject: "storage-gateway", Name: "storage-gateway",
		AuthMethod: auth.MethodGateway, Action: "reclaimDCMProvider", EnvironmentID: environmentID, Status: code})
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// outcome is one registration attempt's result.
type outcome struct {
	environments.DCMRegistration
	retryAfter time.Duration
	// skip: nothing needed doing (the provider is the gateway's, and no
	// renewal is due).
	skip bool
}

// register sends one create (name-keyed, so it creates or updates): 2xx is
// registered; 5xx, 429 and network errors are retried forever; any other
// 4xx is recorded as failed until the environment changes.
func (r *Registrar) register(ctx context.Context, body spmapi.Provider) outcome {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := r.client.CreateProviderWithResponse(ctx, &spmapi.CreateProviderParams{}, body)
	if err != nil {
		return outcome{DCMRegistration: environments.DCMRegistration{State: StatePending, Message: "DCM unreachable; retrying"}}
	}
	code := resp.StatusCode()
	switch {
	case code == http.StatusOK || code == http.StatusCreated:
		p := resp.JSON201
		if p == nil {
			p = resp.JSON200
		}
		reg := environments.DCMRegistration{State: StateRegistered, Message: "registered as " + body.Name}
		if p != nil && p.Id != nil {
			reg.ProviderID = *p.Id
			r.accepted(*p)
		}
		return outcome{DCMRegistration: reg}
	case code >= 500 || code == http.StatusTooManyRequests:
		return outcome{
			DCMRegistration: environments.DCMRegistration{State: StatePending, Message: fmt.Sprintf("DCM answered HTTP %d; retrying", code)},
			retryAfter:      retryAfter(resp.HTTPResponse),
		}
	}
	return outcome{DCMRegistration: environments.DCMRegistration{State: StateFailed,
		Message: fmt.Sprintf("DCM refused the registration (HTTP %d); fix the environment's dcm settings", code)}}
}

// record stores a pass's outcome in the environment's row; it reports true
// when the lease no longer holds (the environment was handed over or
// deleted), and nothing was stored.
func (r *Registrar) record(ctx context.Context, id string, o outcome, lease membership.Lease) (fenced bool) {
	err := r.opts.Environments.RecordRegistration(ctx, id, o.DCMRegistration, lease)
	switch {
	case errors.Is(err, membership.ErrNotOwner):
		r.log.DebugContext(ctx, "DCM registration not recorded: this replica no longer owns the environment", "environment", id)
		return true
	case err != nil:
		r.log.WarnContext(ctx, "record DCM registration", "environment", id, "error", err)
	}
	if o.State != StatePending {
		r.log.InfoContext(ctx, "DCM registration", "environment", id, "state", o.State, "provider_id", o.ProviderID)
	}
	return false
}

// deletedMeanwhile reports whether environment id is no longer registered
// (an error reading it says no: the deletion's notice still deregisters).
func (r *Registrar) deletedMeanwhile(ctx context.Context, id string) bool {
	return fault.Is(r.opts.Environments.Exists(context.WithoutCancel(ctx), id), fault.NotFound)
}

// deregister removes a deleted environment's provider from DCM (best
// effort: DCM's health checks mark a provider that stays behind unhealthy).
func (r *Registrar) deregister(ctx context.Context, environmentID, providerID string) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := r.client.DeleteProviderWithResponse(ctx, providerID)
	switch {
	case err != nil:
		r.log.WarnContext(ctx, "deregister from DCM", "environment", environmentID, "error", err)
	case resp.StatusCode() >= 300 && resp.StatusCode() != http.StatusNotFound:
		r.log.WarnContext(ctx, "deregister from DCM", "environment", environmentID, "status", resp.StatusCode())
	default:
		r.log.InfoContext(ctx, "deregistered from DCM", "environment", environmentID, "provider_id", providerID)
	}
}

// operations are what DCM's service-provider-manager can ask of a storage
// provider, as DCM's own storage SP registers them: its instances have no
// update (PATCH answers 405), so an expansion is made through the gateway
// and DCM's record of the instance keeps the size it was created with.
var operations = []string{"CREATE", "READ", "DELETE"}

// provider is the registration body of an environment.
func (r *Registrar) provider(env environments.Environment) spmapi.Provider {
	operations := slices.Clone(operations)
	meta := &spmapi.ProviderMetadata{}
	if env.Spec.Region != "" {
		meta.RegionCode = &env.Spec.Region
	}
	if env.Spec.Zone != "" {
		meta.Zone = &env.Spec.Zone
	}
	if r.opts.Clusters != nil {
		if total, ok := r.opts.Clusters.TotalStorage(env.ID); ok {
			meta.Resources = &spmapi.ResourceCapacity{TotalStorage: &total}
		}
	}
	name := env.Spec.DCM.ProviderName
	return spmapi.Provider{
		Name:          name,
		DisplayName:   &name,
		ServiceType:   "storage",
		SchemaVersion: "v1alpha1",
		Endpoint:      strings.TrimRight(r.opts.PublicURL, "/") + "/api/v1alpha1/environments/" + env.ID + "/volumes",
		Operations:    &operations,
		Metadata:      meta,
	}
}

func fingerprint(p spmapi.Provider) string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// retryAfter reads a Retry-After header in seconds (the form DCM uses).
func retryAfter(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}
