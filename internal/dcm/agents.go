package dcm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/util/workqueue"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/controller"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

// Wire names of DCM's agent dispatch (dcm-project/control-plane
// internal/sp/messaging/types.go; dcm-project/environment-agent
// internal/messaging and internal/routing/types.go).
const (
	// requestStream is the control plane's stream of requests (it owns
	// it; agents only add consumers, filtered on their topics).
	requestStream = "dcm-agent-requests"
	// responseSubject is where agents answer (the control plane's
	// dcm-agent-responses stream, never created by an agent).
	responseSubject = "dcm.agents.responses"
	// topicPrefix starts every agent's request topic.
	topicPrefix = "dcm.agent."
	// installationPrefix names what belongs to one installation of the
	// gateway on DCM's NATS: its agents' topics are
	// dcm.agent.storage-gateway-INSTALLATION.ENVIRONMENT, and its two
	// consumers storage-gateway-INSTALLATION-consumer and
	// -cancel-consumer.
	installationPrefix = "storage-gateway-"
	// handOffPrefix starts the subject on which a replica takes the
	// requests another replica fetched for the environments it owns
	// (followed by its incarnation).
	handOffPrefix = "storage-gateway.agents."

	typeCreate        = "dcm.request.create"
	typeDelete        = "dcm.request.delete"
	typeCancel        = "dcm.request.cancel"
	typeCreationAck   = "dcm.agent.creation-acknowledged"
	typeDeletionAck   = "dcm.agent.deletion-acknowledged"
	typeRequestQueued = "dcm.agent.request-queued"
	typeCancelAck     = "dcm.agent.cancel-acknowledged"
	typeCancelReject  = "dcm.agent.cancel-rejected"
	typeError         = "dcm.agent.error"

	// healthSubject and healthStream carry agents' health events
	// (environment-agent internal/messaging creates the stream);
	// typeHealthDegraded and typeHealthUnavailable are the events of a
	// service type turning degraded or unavailable (internal/cloudevent).
	healthSubject         = "dcm.agents.health"
	healthStream          = "dcm-health"
	typeHealthDegraded    = "dcm.agent.health.service-type-degraded"
	typeHealthUnavailable = "dcm.agent.health.service-type-unavailable"
)

// Error codes of dcm.agent.error (environment-agent internal/routing).
const (
	errUnsupportedServiceType = "UNSUPPORTED_SERVICE_TYPE"
	errInvalidPayload         = "INVALID_PAYLOAD"
	errRefused                = "NON_RETRYABLE_SP_ERROR"
	errMaxDelivery            = "MAX_DELIVERY_EXCEEDED"
)

// problemTypeBase starts the RFC 9457 problem type of every error the
// agents answer DCM with (DCM's problem type URIs: the slug is the error's
// code in lower case, words joined by '-').
const problemTypeBase = "https://dcm-project.github.io/problems/"

// Consumer settings an agent uses (environment-agent internal/messaging):
// a request is redelivered after AgentOptions.AckWait unless acked, at
// most maxDeliver times; one request's work is bounded by handlerTimeout,
// and by half the ack wait where that is shorter.
const (
	maxDeliver     = 10
	handlerTimeout = time.Minute
	// retryDelay is how soon a request the gateway could not carry out
	// now (the environment not connected yet, the database away) is
	// tried again the first time, queuedDelay every time after (sooner
	// when its cluster turns READY): its tries then span about the
	// control plane's queued timeout (5 min), after which it cancels the
	// request and places it elsewhere.
	retryDelay  = 5 * time.Second
	queuedDelay = 30 * time.Second
	// cancelAckWait is the cancel consumer's (environment-agent's
	// AGENT_MESSAGING_CANCEL_ACK_WAIT).
	cancelAckWait = 10 * time.Second
	// cancelSuffix ends an agent's cancel topic (its topic + ".cancel").
	cancelSuffix = ".cancel"

	// pullBatch is the most requests one fetch takes; doorbellAgain is
	// when the consumers are fetched from the second time after a
	// doorbell; handOffTimeout bounds handing a request to its owner.
	pullBatch      = 16
	doorbellAgain  = time.Second
	handOffTimeout = 5 * time.Second
	// maxAnswer is the most of an agent API answer read.
	maxAnswer = 1 << 20
	// beatGrid is the grid heartbeats are aligned on (onBeat).
	beatGrid = time.Second
	// lagRefresh is how old the agents' lags told in heartbeats may be.
	lagRefresh = 5 * time.Second
	// registrationWorkers register and heartbeat agents at once (10,000
	// environments heartbeating every 30 s are 333 a second);
	// requestWorkers carry out different environments' requests at once.
	registrationWorkers = 4
	requestWorkers      = 8
	// fetchKey is the one key of the fetches: the installation's
	// consumers.
	fetchKey = "consumers"
)

// AgentVolumes are the volume use cases DCM's requests go through — the
// same as the API's (a *volumes.Service).
type AgentVolumes interface {
	Create(ctx context.Context, envID, id, idempotencyKey string, req volumes.Request) (volumes.Volume, bool, error)
	Delete(ctx context.Context, envID, id string) error
	// Installation is the installation's identity, which names its
	// agents' topics and its consumers.
	Installation(ctx context.Context) (string, error)
}

// AgentOwners tell which replica owns an environment (a
// *membership.Membership): a request fetched here for an environment
// another replica owns is handed to that replica, on the subject of its
// incarnation.
type AgentOwners interface {
	Owner(ctx context.Context, env string) (membership.Peer, error)
	Incarnation() uuid.UUID
}

// AgentClusters are the live clusters' health (a *clusters.Pool).
type AgentClusters interface {
	Health(environmentID string) (clusters.Health, bool)
	Subscribe() *changes.Subscription[clusters.Change]
}

// AgentOptions configure the agent dispatch.
type AgentOptions struct {
	// URL is the control plane's agent API, e.g. http://dcm:8080/api/v1alpha1.
	URL          string
	Environments *environments.Service
	// Owned are the environments this replica serves as agents: an
	// environment's agent is its owner's. Owners tell who owns the
	// others.
	Owned   membership.Ownership
	Owners  AgentOwners
	Volumes AgentVolumes
	// CheckSpec holds a create's StorageSpec to the rules the API holds
	// a create's body to (the contract's schema), before it is carried
	// out.
	CheckSpec func(spec json.RawMessage) error
	// Clusters tell each environment's cluster health: a cluster turning
	// degraded or unreachable is an agent health event.
	Clusters  AgentClusters
	JetStream jetstream.JetStream
	// Credentials authenticate the calls to the agent API.
	Credentials Credentials
	// Heartbeat is how often each agent tells the control plane it lives.
	Heartbeat time.Duration
	// AckWait is how long a request delivered may stay unanswered before
	// it is delivered again (default 2m, environment-agent's).
	AckWait time.Duration
	// Cost is what the agents advertise (low, medium-low, medium,
	// medium-high, high).
	Cost string
	// Audit records every volume DCM's requests create or delete, before
	// the answer.
	Audit  *auth.AuditLog
	Logger *slog.Logger
}

// Agents serve each environment this replica owns, with dcm.register on,
// as its storage agent for DCM's control plane: registered in the agent
// API under the environment's provider name, heartbeated with the
// requests it has not acked yet as its lag, and carrying out the requests
// the control plane places on it. A create or delete goes through the
// volume use cases the API uses, is audited, and is answered on
// dcm.agents.responses; the request is acked only once its answer is
// published, so a crash before redelivers it, and the redelivery answers
// the same (creates are idempotent by resource_id, a delete of what is
// gone is acknowledged). A request the gateway cannot carry out now is
// held and tried again later.
//
// The installation's agents share two durable consumers of DCM's request
// stream, whatever the fleet's size: every agent's topic is
// dcm.agent.storage-gateway-INSTALLATION.ENVIRONMENT, one consumer takes
// them all (…INSTALLATION.*) and one their cancels (…INSTALLATION.*.cancel).
// A consumer per agent, as environment-agent has, would be 20,000
// consumers on one stream at 10,000 environments — beyond what a NATS
// server allows a stream by default (1,000). Every replica fetches from
// the two; a request fetched for an environment another replica owns is
// handed to that replica (a core NATS request to its incarnation's
// subject, carrying the request's ack subject), which carries it out and
// acks it as if it had fetched it: held requests and cancels stay with
// the owner. An owner that cannot be reached leaves the request to be
// delivered again a moment later, when ownership has settled.
//
// Three reconcilers (internal/controller) do the work. One, keyed by
// environment, registers and heartbeats: looked at when the environment
// is registered, changed, gained or lost, and every heartbeat. One fetches
// from the consumers: rung by one core subscription to every agent topic
// (the doorbell) when a request for an agent served here is published, at
// the start of serving, and by a heartbeat that finds requests waiting
// (delivered again, or published while the doorbell was away) — nothing
// is pushed, so an idle fleet holds no subscription per agent and no
// goroutine. One, keyed by environment, carries out what was fetched or
// handed over for an agent, and its held requests when due.
type Agents struct {
	opts AgentOptions
	http *http.Client
	log  *slog.Logger
	// ctl registers and heartbeats the agents; fetches takes requests
	// from the consumers; pulls carries them out.
	ctl, fetches, pulls *controller.Controller

	mu sync.Mutex
	// running are the agents this replica serves, by environment.
	running map[string]*agent

	// lags are the request stream's messages by subject, read at.
	lags struct {
		mu     sync.Mutex
		at     time.Time
		counts map[string]uint64
	}

	// streams holds what is the same for every agent, looked at once: the
	// installation's topic root and consumers, the request stream's
	// handle, and whether the health stream exists.
	streams struct {
		mu                sync.Mutex
		root              string
		requests, cancels jetstream.Consumer
		stream            jetstream.Stream
		health            bool
	}
}

// agent is one environment's agent as this replica serves it.
type agent struct {
	name, topic string
	// id is the control plane's id of the agent, once registered, and
	// registered the fields it was registered with.
	id         string
	registered agentRegistration
	// beat is when the control plane last heard it live.
	beat time.Time
	// health is the cluster health last told to DCM; ready whether the
	// cluster was READY and synced when last looked at.
	health clusters.HealthState
	ready  bool

	// inbox are the requests and cancels fetched or handed over for it
	// and not looked at yet (its own lock: a hand-off never waits for a
	// cancel's calls to NATS).
	inboxMu sync.Mutex
	inbox   []delivery

	// mu orders a create and a cancel of one resource: working are the
	// resources whose request is being carried out now, held the requests
	// waiting here for their environment (a cancel removes a held create
	// from the stream).
	mu      sync.Mutex
	working map[string]bool
	held    map[string]*heldRequest
}

// NewAgents returns the agent dispatch; Run starts it.
func NewAgents(opts AgentOptions) (*Agents, error) {
	httpClient, err := opts.Credentials.httpClient()
	if err != nil {
		return nil, err
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 30 * time.Second
	}
	if opts.AckWait <= 0 {
		opts.AckWait = 2 * time.Minute
	}
	a := &Agents{opts: opts, http: httpClient, log: opts.Logger.With("component", "dcm agents"), running: map[string]*agent{}}
	a.ctl = controller.New(controller.Options{Name: "dcm agents", Logger: a.log, Reconcile: a.reconcile, Workers: registrationWorkers,
		List: opts.Environments.IDs, Owns: func(id string) bool { return opts.Owned.Owns(id) || a.serving(id) },
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute)})
	a.fetches = controller.New(controller.Options{Name: "dcm agent fetches", Logger: a.log, Reconcile: a.fetch, Workers: 1})
	a.fetches.Source(a.doorbell)
	a.pulls = controller.New(controller.Options{Name: "dcm agent requests", Logger: a.log, Reconcile: a.pull, Workers: requestWorkers,
		Owns: a.serving})
	a.pulls.Source(a.takeHandOffs)
	controller.Watch(a.ctl, opts.Environments.Subscribe(), func(c environments.Change) []string { return []string{c.EnvironmentID} })
	controller.Watch(a.ctl, opts.Owned.Subscribe(), func(c membership.Change) []string { return []string{c.EnvironmentID} })
	controller.Watch(a.ctl, opts.Clusters.Subscribe(), func(c clusters.Change) []string {
		if c.Kind == clusters.HealthChanged {
			return []string{c.EnvironmentID}
		}
		return nil
	})
	return a, nil
}

// Started reports whether the reconciler runs (readiness).
func (a *Agents) Started() bool { return a.ctl.Started() }

// Run serves the agents until ctx ends, and returns once no request is
// being carried out.
func (a *Agents) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { a.pulls.Run(ctx) })
	wg.Go(func() { a.fetches.Run(ctx) })
	a.ctl.Run(ctx)
	wg.Wait()
}

func (a *Agents) serving(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running[id] != nil
}

// reconcile serves environment id as an agent if this replica owns it and
// it registers with DCM, and stops serving it otherwise; a served one is
// registered when it is not yet, or with other fields, and heartbeated.
func (a *Agents) reconcile(ctx context.Context, id string) (time.Duration, error) {
	// The spec alone, from memory: a heartbeat reads no row.
	env, err := a.opts.Environments.Spec(ctx, id)
	switch {
	case fault.Is(err, fault.NotFound):
		a.leave(id)
		return 0, nil
	case err != nil:
		return 0, err
	case !a.opts.Owned.Owns(id) || !env.Spec.DCM.Register:
		a.leave(id)
		return 0, nil
	}
	ag, started, err := a.serve(ctx, id, env.Spec.DCM.ProviderName)
	if err != nil {
		return 0, err
	}
	if started {
		a.fetches.Add(fetchKey) // what waits for it
	}
	if err := a.tellHealth(ctx, id, ag); err != nil {
		return 0, err
	}
	body := a.registration(id, ag)
	if ag.id == "" || !reflect.DeepEqual(ag.registered, body) {
		if ag.id, err = a.register(ctx, body); err != nil {
			return 0, err
		}
		ag.registered, ag.beat = body, time.Now() // a registration is a heartbeat
		a.log.InfoContext(ctx, "registered as DCM's agent", "environment", id, "agent", ag.name, "agent_id", ag.id)
		return onBeat(a.opts.Heartbeat), nil
	}
	if since := time.Since(ag.beat); since < a.opts.Heartbeat {
		return onBeat(a.opts.Heartbeat - since), nil // looked at for another reason: not due yet
	}
	lag, err := a.heartbeat(ctx, ag)
	switch {
	case errors.Is(err, errUnknownAgent):
		ag.id = "" // the control plane lost it: register again now
		return time.Millisecond, nil
	case err != nil:
		return 0, err
	}
	ag.beat = time.Now()
	if lag > 0 {
		// Requests wait that no doorbell announced: delivered again
		// after a replica that held them died, or published while the
		// doorbell was away (those held here count too: fetching finds
		// nothing new then).
		a.fetches.Add(fetchKey)
	}
	return onBeat(a.opts.Heartbeat), nil
}

// onBeat is d, stretched to the next whole beatGrid: the agents' heartbeats
// come in bursts, a few wake-ups a second for thousands of agents instead
// of one each (the wake-ups, not the calls, were most of an idle fleet's
// cost).
func onBeat(d time.Duration) time.Duration {
	at := time.Now().Add(d)
	return time.Until(at.Truncate(beatGrid).Add(beatGrid))
}

// leave stops serving environment id here (lost, deleted, or no longer
// registering). The control plane's agent API has no removal: the agent
// turns unavailable there once its heartbeats stop, and the requests it
// has not acked are delivered again, to its next owner.
func (a *Agents) leave(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ag := a.running[id]; ag != nil {
		a.forget(id, ag)
		a.log.Info("no longer DCM's agent here", "environment", id, "agent", ag.name)
	}
}

// forget stops serving environment id's agent ag; the caller holds a.mu.
// What was fetched for it and not begun is delivered again at once, to its
// next owner (what is held here comes back after the ack wait).
func (a *Agents) forget(id string, ag *agent) {
	delete(a.running, id)
	for _, d := range ag.take() {
		_ = d.msg.NakWithDelay(0)
	}
}

// serve returns env's agent, creating it if it is not served yet
// (started), or was under another name.
func (a *Agents) serve(ctx context.Context, envID, name string) (ag *agent, started bool, err error) {
	if name == "" {
		name = environments.DefaultProviderName(envID)
	}
	root, err := a.root(ctx)
	if err != nil {
		return nil, false, err
	}
	if err := a.ensureHealthStream(ctx); err != nil {
		return nil, false, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ag := a.running[envID]; ag != nil && ag.name == name {
		return ag, false, nil
	} else if ag != nil {
		a.forget(envID, ag) // renamed: registered again under the new name
	}
	ag = &agent{name: name, topic: root + "." + envID, working: map[string]bool{}, held: map[string]*heldRequest{}}
	a.running[envID] = ag
	return ag, true, nil
}

// root is the installation's topic root, which every agent topic of it
// extends by its environment's id.
func (a *Agents) root(ctx context.Context) (string, error) {
	a.streams.mu.Lock()
	defer a.streams.mu.Unlock()
	if a.streams.root == "" {
		id, err := a.opts.Volumes.Installation(ctx)
		if err != nil {
			return "", err
		}
		a.streams.root = topicPrefix + installationPrefix + id
	}
	return a.streams.root, nil
}

// knownRoot is the installation's topic root if it was read already
// (every agent served here has read it), or "".
func (a *Agents) knownRoot() string {
	a.streams.mu.Lock()
	defer a.streams.mu.Unlock()
	return a.streams.root
}

// consumers are the installation's two durable consumers of the request
// stream, created (or brought to these settings) once: one of every
// agent's requests, one of their cancels. Neither caps the requests
// delivered and not acked (NATS's default is 1,000): the whole fleet's
// held requests count there, and an outage holding that many would stop
// every agent's deliveries.
func (a *Agents) consumers(ctx context.Context) (requests, cancels jetstream.Consumer, err error) {
	root, err := a.root(ctx)
	if err != nil {
		return nil, nil, err
	}
	a.streams.mu.Lock()
	defer a.streams.mu.Unlock()
	if a.streams.requests != nil {
		return a.streams.requests, a.streams.cancels, nil
	}
	name := strings.TrimPrefix(root, topicPrefix)
	requests, err = a.opts.JetStream.CreateOrUpdateConsumer(ctx, requestStream, jetstream.ConsumerConfig{
		Durable: name + "-consumer", FilterSubject: root + ".*", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: a.opts.AckWait, MaxDeliver: maxDeliver, MaxAckPending: -1})
	if err != nil {
		return nil, nil, consumerRefused(root+".*", err)
	}
	cancels, err = a.opts.JetStream.CreateOrUpdateConsumer(ctx, requestStream, jetstream.ConsumerConfig{
		Durable: name + "-cancel-consumer", FilterSubject: root + ".*" + cancelSuffix, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: cancelAckWait, MaxAckPending: -1})
	if err != nil {
		return nil, nil, consumerRefused(root+".*"+cancelSuffix, err)
	}
	a.streams.requests, a.streams.cancels = requests, cancels
	return requests, cancels, nil
}

// dropConsumers forgets the consumers, to be created again when next
// needed.
func (a *Agents) dropConsumers() {
	a.streams.mu.Lock()
	defer a.streams.mu.Unlock()
	a.streams.requests, a.streams.cancels = nil, nil
}

// requestStream is the control plane's request stream, looked up once.
func (a *Agents) requestStream(ctx context.Context) (jetstream.Stream, error) {
	a.streams.mu.Lock()
	defer a.streams.mu.Unlock()
	if a.streams.stream == nil {
		stream, err := a.opts.JetStream.Stream(ctx, requestStream)
		if err != nil {
			return nil, err
		}
		a.streams.stream = stream
	}
	return a.streams.stream, nil
}

// ensureHealthStream makes sure the health stream exists: agents own it (the
// control plane does not create it).
func (a *Agents) ensureHealthStream(ctx context.Context) error {
	a.streams.mu.Lock()
	defer a.streams.mu.Unlock()
	if a.streams.health {
		return nil
	}
	if _, err := a.opts.JetStream.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: healthStream, Subjects: []string{healthSubject}}); err != nil {
		return err
	}
	a.streams.health = true
	return nil
}

// consumerRefused says why NATS refused the installation's consumer of
// filter.
func consumerRefused(filter string, err error) error {
	return fmt.Errorf("consume the requests on %s (does DCM's control plane run on this NATS?): %w", filter, err)
}

// tellHealth publishes an agent health event when env's cluster turned
// degraded or unreachable since DCM was last told, as an agent does for
// its service providers (environment-agent internal/health); recovery
// shows in the requests it carries out again — those held for the
// cluster at once.
func (a *Agents) tellHealth(ctx context.Context, envID string, ag *agent) error {
	h, ok := a.opts.Clusters.Health(envID)
	ready := ok && h.State == clusters.HealthReady && h.Synced
	if ready && !ag.ready && ag.retryHeld() {
		a.pulls.Add(envID) // what waited for the cluster is carried out now
	}
	ag.ready = ready
	if !ok || h.State == ag.health {
		return nil
	}
	typ, reason := "", ""
	switch h.State {
	case clusters.HealthUnreachable:
		typ, reason = typeHealthUnavailable, "the environment's cluster is unreachable: "+h.Message
	case clusters.HealthDegraded:
		typ, reason = typeHealthDegraded, "the environment's cluster is degraded: "+h.Message
	}
	if typ != "" {
		data := map[string]any{"agent_id": cmp.Or(ag.id, ag.name), "agent_name": ag.name, "topic_name": ag.topic,
			"service_type": volumes.ServiceType, "reason": reason, "affected_provider": ag.name}
		if err := a.publish(ctx, healthSubject, uuid.NewString(), typ, ag.name, data); err != nil {
			return err
		}
	}
	ag.health = h.State
	return nil
}

// agentRegistration is the agent API's AgentRegistrationRequest.
type agentRegistration struct {
	Name         string   `json:"name"`
	Environment  string   `json:"environment"`
	TopicName    string   `json:"topic_name"`
	ServiceTypes []string `json:"service_types"`
	Cost         string   `json:"cost"`
}

func (a *Agents) registration(envID string, ag *agent) agentRegistration {
	return agentRegistration{Name: ag.name, Environment: envID, TopicName: ag.topic,
		ServiceTypes: []string{volumes.ServiceType}, Cost: a.opts.Cost}
}

// register registers (or updates: the agent API is idempotent by name) an
// agent and returns its id.
func (a *Agents) register(ctx context.Context, body agentRegistration) (string, error) {
	var out struct {
		ID string `json:"agent_id"`
	}
	if err := a.call(ctx, http.MethodPost, "/agents", body, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", errors.New("the agent API answered a registration without an agent_id")
	}
	return out.ID, nil
}

// errUnknownAgent is the agent API's 404 for an agent it does not know (it
// lost its state): the agent registers again.
var errUnknownAgent = errors.New("the control plane does not know the agent")

// heartbeat tells the control plane ag lives, with the requests not acked
// yet as its lag, and returns the lag (errUnknownAgent: the control plane
// no longer knows the agent).
func (a *Agents) heartbeat(ctx context.Context, ag *agent) (uint64, error) {
	lag, err := a.lag(ctx, ag.topic)
	if err != nil {
		return 0, err
	}
	body := map[string]any{"timestamp": time.Now().UTC(), "consumer_lag": lag}
	return lag, a.call(ctx, http.MethodPut, "/agents/"+ag.id+"/heartbeat", body, nil)
}

// lag is how many requests on topic are not acked yet. The request stream
// is a work queue, which keeps a request until its agent acks it, so its
// count of messages per subject is every agent's lag at once: read for
// all of them, at most every lagRefresh, instead of one consumer's info
// per heartbeat.
func (a *Agents) lag(ctx context.Context, topic string) (uint64, error) {
	a.lags.mu.Lock()
	defer a.lags.mu.Unlock()
	if time.Since(a.lags.at) >= lagRefresh {
		stream, err := a.requestStream(ctx)
		if err != nil {
			return 0, err
		}
		root, err := a.root(ctx)
		if err != nil {
			return 0, err
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(root+".>"))
		if err != nil {
			return 0, err
		}
		a.lags.counts, a.lags.at = info.State.Subjects, time.Now()
	}
	return a.lags.counts[topic], nil
}

// call sends one request to the agent API.
func (a *Agents) call(ctx context.Context, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	payload, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(a.opts.URL, "/")+path, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	reply := io.LimitReader(resp.Body, maxAnswer)
	defer func() {
		// Read to the end, so the connection serves the next call (a
		// heartbeat's answer is not read otherwise).
		_, _ = io.Copy(io.Discard, reply)
		_ = resp.Body.Close()
	}()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errUnknownAgent
	case resp.StatusCode >= 300:
		var p struct {
			Type, Detail string
		}
		_ = json.NewDecoder(reply).Decode(&p)
		return fmt.Errorf("the agent API answered %s %s: %d %s: %s", method, path, resp.StatusCode, p.Type, p.Detail)
	case out != nil:
		return json.NewDecoder(reply).Decode(out)
	}
	return nil
}
