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

	"github.com/cenkalti/backoff/v5"
	spmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/provider"
	spmclient "github.com/dcm-project/service-provider-manager/pkg/client/provider"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/membership"
)

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
	Clusters *clusters.Pool
	// Credentials authenticate the calls to DCM (none by default).
	Credentials Credentials
	// Owned are the environments this replica registers: each is
	// registered by its owner alone, and a hand-over has the new owner
	// register it at once.
	Owned membership.Ownership
}

// Registrar keeps every environment with dcm.register that this replica
// owns registered. It subscribes to the registry's and the ownership's
// changes (and the pool's, when it has one): a registration, update or
// hand-over wakes it, a deletion deregisters the provider.
type Registrar struct {
	opts   Options
	client *spmclient.ClientWithResponses
	log    *slog.Logger
	wake   chan struct{}

	registryChanges  *changes.Subscription[environments.Change]
	ownershipChanges *changes.Subscription[membership.Change]
	clusterChanges   *changes.Subscription[clusters.Change]

	mu    sync.Mutex
	state map[string]*registration
	// forgotten are deleted environments whose providers leave DCM next.
	forgotten []environments.Change
}

// registration is what the registrar knows about one environment.
type registration struct {
	// tried is the fingerprint of the last body sent: a wake-up retries at
	// once only a body not tried yet, never one waiting out a backoff.
	tried       string
	fingerprint string    // of the last body DCM accepted or refused for good
	done        time.Time // when that happened
	retryAt     time.Time
	backoff     *backoff.ExponentialBackOff
	// providerID is the provider DCM answered with, kept for deregistering:
	// an environment deleted while its registration was in flight has no
	// provider id in its row.
	providerID string
}

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
	r := &Registrar{opts: opts, client: client, log: opts.Logger.With("component", "dcm"),
		wake: make(chan struct{}, 1), state: map[string]*registration{},
		registryChanges: opts.Environments.Subscribe(), ownershipChanges: opts.Owned.Subscribe()}
	if opts.Clusters != nil {
		r.clusterChanges = opts.Clusters.Subscribe()
	}
	return r, nil
}

// changed wakes the registration loop.
func (r *Registrar) changed() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run registers until ctx ends. Deregistrations run on the same loop as
// registrations, so a registration that read the environment before it was
// deleted can never land after its deregistration.
func (r *Registrar) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		r.registryChanges.Run(ctx, func(ctx context.Context, c environments.Change) {
			if c.Deleted {
				r.mu.Lock()
				r.forgotten = append(r.forgotten, c)
				r.mu.Unlock()
			}
			r.changed()
		})
	})
	wg.Go(func() { r.ownershipChanges.Run(ctx, func(context.Context, membership.Change) { r.changed() }) })
	if r.clusterChanges != nil {
		wg.Go(func() {
			r.clusterChanges.Run(ctx, func(_ context.Context, c clusters.Change) {
				// The capacity it publishes is known now.
				if c.Kind == clusters.HealthChanged && r.opts.Clusters.ReadyAndSynced(c.EnvironmentID) {
					r.changed()
				}
			})
		})
	}
	for {
		r.mu.Lock()
		forgotten := r.forgotten
		r.forgotten = nil
		r.mu.Unlock()
		for _, c := range forgotten {
			r.deregister(ctx, c.EnvironmentID, c.DCMProviderID)
		}
		next := r.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-time.After(time.Until(next)):
		}
	}
}

// sync registers what needs it and returns when to look again.
func (r *Registrar) sync(ctx context.Context) time.Time {
	next := time.Now().Add(r.opts.Interval)
	err := r.opts.Environments.Each(ctx, func(env environments.Environment) error {
		if !r.opts.Owned.Owns(env.ID) {
			r.mu.Lock()
			delete(r.state, env.ID) // a later hand-over back registers it at once
			r.mu.Unlock()
			return nil
		}
		if claim, err := r.opts.Owned.Claim(env.ID); err == nil && env.Spec.DCM.Register {
			if at := r.ensure(ctx, env, claim); at.Before(next) {
				next = at
			}
		}
		return nil
	})
	if err != nil {
		r.log.WarnContext(ctx, "list environments to register", "error", err)
		return time.Now().Add(5 * time.Second)
	}
	return next
}

// ensure registers env if its registration is missing, changed, due for
// renewal or due for a retry, and returns when it next needs attention.
func (r *Registrar) ensure(ctx context.Context, env environments.Environment, claim membership.Claim) time.Time {
	body := r.provider(env)
	fp := fingerprint(body)
	r.mu.Lock()
	reg := r.state[env.ID]
	if reg == nil {
		reg = &registration{backoff: newBackoff()}
		r.state[env.ID] = reg
	}
	now := time.Now()
	switch {
	case reg.fingerprint == fp && now.Sub(reg.done) < r.opts.Interval:
		r.mu.Unlock()
		return reg.done.Add(r.opts.Interval)
	case reg.tried != fp:
		reg.retryAt = time.Time{} // changed: try at once
	case now.Before(reg.retryAt):
		r.mu.Unlock()
		return reg.retryAt
	}
	r.mu.Unlock()

	r.mu.Lock()
	reg.tried = fp
	r.mu.Unlock()
	outcome := r.register(ctx, body)
	r.record(ctx, env.ID, outcome, claim)
	r.mu.Lock()
	defer r.mu.Unlock()
	if outcome.State == StatePending {
		wait := reg.backoff.NextBackOff()
		if outcome.retryAfter > wait {
			wait = outcome.retryAfter
		}
		reg.retryAt = time.Now().Add(wait)
		return reg.retryAt
	}
	reg.backoff.Reset()
	reg.fingerprint, reg.done = fp, time.Now()
	if outcome.ProviderID != "" {
		reg.providerID = outcome.ProviderID
	}
	return reg.done.Add(r.opts.Interval)
}

// outcome is one registration attempt's result.
type outcome struct {
	environments.DCMRegistration
	retryAfter time.Duration
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

func (r *Registrar) record(ctx context.Context, id string, o outcome, claim membership.Claim) {
	err := r.opts.Environments.RecordRegistration(ctx, id, o.DCMRegistration, claim)
	switch {
	case errors.Is(err, membership.ErrNotOwner):
		r.log.DebugContext(ctx, "DCM registration not recorded: another replica owns the environment now", "environment", id)
		return
	case err != nil:
		r.log.WarnContext(ctx, "record DCM registration", "environment", id, "error", err)
	}
	if o.State != StatePending {
		r.log.InfoContext(ctx, "DCM registration", "environment", id, "state", o.State, "provider_id", o.ProviderID)
	}
}

// deregister removes a deleted environment's provider from DCM (best
// effort: DCM's health checks mark a provider that stays behind unhealthy).
func (r *Registrar) deregister(ctx context.Context, environmentID, providerID string) {
	r.mu.Lock()
	if reg := r.state[environmentID]; reg != nil && providerID == "" {
		providerID = reg.providerID
	}
	delete(r.state, environmentID)
	r.mu.Unlock()
	if providerID == "" {
		return
	}
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

func newBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = time.Second
	b.MaxInterval = 5 * time.Minute
	return b
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
