// Package controlplane is a stand-in for DCM's control plane as it
// dispatches requests to agents — dcm-project/control-plane at commit
// 1c577bc, whose module cannot be fetched here, read file by file: the
// agent API (api/agent/v1alpha1/openapi.yaml, internal/agent/service/
// agent.go, internal/agent/handlers/v1alpha1/errors.go, internal/agent/
// healthcheck/monitor.go), the request publisher (internal/sp/messaging/
// types.go, publisher.go), the response consumer (internal/sp/consumer/
// response_consumer.go), the status consumer (internal/sp/consumer/
// consumer.go), the pending sweep (internal/sp/pending/sweep.go) and the
// instance lifecycle (internal/sp/store/model/status.go). Each behaviour
// names the file it follows. Tests run the gateway against it as DCM's
// agent dispatch; it must never be imported by production code.
package controlplane

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Wire names of the agent dispatch (internal/sp/messaging/types.go).
const (
	RequestStream     = "dcm-agent-requests"
	RequestSubjects   = "dcm.agent.>"
	ResponseStream    = "dcm-agent-responses"
	ResponseSubject   = "dcm.agents.responses"
	StatusStream      = "dcm-status"
	StatusSubjects    = "dcm.*"
	Source            = "dcm/control-plane"
	TypeCreate        = "dcm.request.create"
	TypeDelete        = "dcm.request.delete"
	TypeCancel        = "dcm.request.cancel"
	TypeCreationAck   = "dcm.agent.creation-acknowledged"
	TypeDeletionAck   = "dcm.agent.deletion-acknowledged"
	TypeRequestQueued = "dcm.agent.request-queued"
	TypeError         = "dcm.agent.error"
	TypeCancelAck     = "dcm.agent.cancel-acknowledged"
	TypeCancelReject  = "dcm.agent.cancel-rejected"
	// responseConsumer is the durable consumer of the responses
	// (response_consumer.go).
	responseConsumer = "control-plane-response-consumer"
	// statusConsumer is the status consumer's durable name
	// (NATS_CONSUMER_NAME's default in internal/app/config.go).
	statusConsumer = "control-plane"
)

// Options are the control plane's settings; zero values take its defaults
// (internal/app/config.go).
type Options struct {
	// NATSURL is the NATS server with JetStream it publishes to and reads.
	NATSURL string
	// Listen is the agent API's address (default: a free loopback port).
	Listen string
	// PendingTimeout re-places a request no agent acknowledged
	// (AGENT_PENDING_REQUEST_TIMEOUT, 2m); QueuedTimeout cancels and
	// re-places one an agent queued (AGENT_QUEUED_REQUEST_TIMEOUT, 5m);
	// MaxRetries bounds both (AGENT_PENDING_REQUEST_MAX_RETRIES, 3);
	// SweepInterval is how often it looks (AGENT_SWEEP_INTERVAL, 10s).
	PendingTimeout, QueuedTimeout, SweepInterval time.Duration
	MaxRetries                                   int
	// LagThreshold makes an agent congested (AGENT_CONSUMER_LAG_THRESHOLD,
	// 100); HeartbeatTimeout unavailable (AGENT_HEARTBEAT_TIMEOUT, 60s).
	LagThreshold     int64
	HeartbeatTimeout time.Duration
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.PendingTimeout, 2*time.Minute)
	def(&o.QueuedTimeout, 5*time.Minute)
	def(&o.SweepInterval, 10*time.Second)
	def(&o.HeartbeatTimeout, time.Minute)
	if o.MaxRetries <= 0 {
		o.MaxRetries = 3
	}
	if o.LagThreshold <= 0 {
		o.LagThreshold = 100
	}
	return o
}

// ControlPlane is a running stand-in.
type ControlPlane struct {
	// URL is the agent API's base (…/api/v1alpha1).
	URL  string
	opts Options
	js   jetstream.JetStream
	// wg holds its API server and sweep; close stops them and NATS.
	wg    sync.WaitGroup
	close func() error

	mu            sync.Mutex
	agents        map[string]*Agent
	registrations []Agent
	heartbeats    int
	instances     map[string]*Instance
	// dropped are the responses and status events it discarded, and why.
	dropped []string
	// responsesHeld and statusesHeld hold its consumers (HoldResponses,
	// HoldStatuses).
	responsesHeld, statusesHeld gate
}

// gate holds whoever waits at it while it is shut.
type gate struct {
	mu sync.Mutex
	// open is closed while the gate is open; nil is open.
	open chan struct{}
}

func (g *gate) set(held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case held && g.open == nil:
		g.open = make(chan struct{})
	case !held && g.open != nil:
		close(g.open)
		g.open = nil
	}
}

// wait returns once the gate is open, or ctx ends.
func (g *gate) wait(ctx context.Context) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open != nil {
		select {
		case <-open:
		case <-ctx.Done():
		}
	}
}

// HoldResponses makes the response consumer wait (true) before it applies
// the next response, until released (false); HoldStatuses the same for
// the status consumer. A control plane whose consumers lag behind its
// agents meets the same orderings; a test drives them on purpose. Each
// hold must stay inside the consumer's ack wait (30 s).
func (cp *ControlPlane) HoldResponses(held bool) { cp.responsesHeld.set(held) }

// HoldStatuses: see HoldResponses.
func (cp *ControlPlane) HoldStatuses(held bool) { cp.statusesHeld.set(held) }

// Start runs a control plane until the test ends.
func Start(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	cp, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Close(); err != nil {
			t.Errorf("control plane: %v", err)
		}
	})
	return cp
}

// Run starts a control plane — its agent API, its streams, its consumers
// and its sweep — until Close.
func Run(ctx context.Context, opts Options) (*ControlPlane, error) {
	cp := &ControlPlane{opts: opts.withDefaults(), agents: map[string]*Agent{}, instances: map[string]*Instance{}}
	nc, err := nats.Connect(opts.NATSURL, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	cp.close = func() error { cancel(); cp.wg.Wait(); nc.Close(); return nil }
	fail := func(err error) (*ControlPlane, error) { _ = cp.close(); return nil, err }
	if cp.js, err = jetstream.New(nc); err != nil {
		return fail(err)
	}
	if err := cp.consume(ctx); err != nil {
		return fail(err)
	}
	listen := cmp.Or(opts.Listen, "127.0.0.1:0")
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listen)
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{Handler: cp.routes(), ReadHeaderTimeout: 10 * time.Second}
	cp.URL = "http://" + ln.Addr().String() + "/api/v1alpha1"
	var served error
	cp.wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			served = err
		}
	})
	cp.wg.Go(func() { cp.sweepEvery(ctx) })
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	cp.close = func() error { cancel(); cp.wg.Wait(); nc.Close(); return served }
	return cp, nil
}

// Close stops the control plane and returns what stopped its API early.
func (cp *ControlPlane) Close() error { return cp.close() }

// Agents are the registered agents.
func (cp *ControlPlane) Agents() []Agent {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make([]Agent, 0, len(cp.agents))
	for _, a := range cp.agents {
		out = append(out, *a)
	}
	return out
}

// Heartbeats counts the heartbeats received.
func (cp *ControlPlane) Heartbeats() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.heartbeats
}

// Dropped lists the responses and status events discarded, with why.
func (cp *ControlPlane) Dropped() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.dropped...)
}

// drop records a discarded message; the caller holds cp.mu.
func (cp *ControlPlane) drop(why string) { cp.dropped = append(cp.dropped, why) }

// consume creates the streams and starts the response and status
// consumers. The control plane owns the request and response streams,
// work queues both (publisher.go), and reads the status stream.
func (cp *ControlPlane) consume(ctx context.Context) error {
	for _, s := range []jetstream.StreamConfig{
		{Name: RequestStream, Subjects: []string{RequestSubjects}, Retention: jetstream.WorkQueuePolicy},
		{Name: ResponseStream, Subjects: []string{ResponseSubject}, Retention: jetstream.WorkQueuePolicy},
		{Name: StatusStream, Subjects: []string{StatusSubjects}},
	} {
		if _, err := cp.js.CreateOrUpdateStream(ctx, s); err != nil {
			return err
		}
	}
	responses, err := cp.js.CreateOrUpdateConsumer(ctx, ResponseStream, jetstream.ConsumerConfig{Durable: responseConsumer,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 10})
	if err != nil {
		return err
	}
	statuses, err := cp.js.CreateOrUpdateConsumer(ctx, StatusStream, jetstream.ConsumerConfig{Durable: statusConsumer,
		AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	for consumer, handle := range map[jetstream.Consumer]func(jetstream.Msg){
		responses: func(msg jetstream.Msg) { cp.responsesHeld.wait(ctx); cp.onResponse(msg) },
		statuses:  func(msg jetstream.Msg) { cp.statusesHeld.wait(ctx); cp.onStatus(msg) },
	} {
		cc, err := consumer.Consume(handle)
		if err != nil {
			return err
		}
		context.AfterFunc(ctx, cc.Stop)
	}
	return nil
}
