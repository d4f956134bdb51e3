package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The instance lifecycle (internal/sp/store/model/status.go).
const (
	StatusPending         = "pending"
	StatusQueued          = "queued"
	StatusProvisioning    = "provisioning"
	StatusRunning         = "running"
	StatusDeleting        = "deleting"
	StatusCancelled       = "cancelled"
	StatusFailed          = "failed"
	StatusPendingDeletion = "pending_deletion"
	// StatusDeleted is a provider's DELETED status event as the status
	// consumer stores it (lower-cased, whatever the instance's status).
	StatusDeleted = "deleted"
)

// Instance is one service-type instance as the control plane records it.
type Instance struct {
	ResourceID, ServiceType string
	Spec                    map[string]any
	// AgentName is the agent the request is placed on; responses of any
	// other are ignored.
	AgentName  string
	Status     string
	Message    string
	OutputSpec map[string]any
	RetryCount int
	// Since is when the request was placed (or queued): the sweep's clock.
	Since time.Time
	// Excluded are the agents it was placed on before.
	Excluded []string
	// Heard are the types of the responses its agent sent, applied or
	// not, in order; Errors the data of its dcm.agent.error responses
	// (the control plane fails the instance and keeps none of it: a test
	// reads what the agent said).
	Heard  []string
	Errors []map[string]any
}

// Envelope is a CloudEvent as the control plane publishes one
// (publisher.go): no time attribute, the id also its Nats-Msg-Id.
type Envelope struct {
	SpecVersion string          `json:"specversion"`
	Type        string          `json:"type"`
	Source      string          `json:"source"`
	Subject     string          `json:"subject"`
	ID          string          `json:"id"`
	Data        json.RawMessage `json:"data"`
}

// Request is the data of a request (CreatePayload, DeletePayload and
// CancelPayload in types.go; Spec only in a create's).
type Request struct {
	ResourceID  string         `json:"resource_id"`
	ServiceType string         `json:"service_type"`
	Spec        map[string]any `json:"spec,omitempty"`
}

// Instance returns the instance of resourceID; false once it is gone (a
// deletion the agent acknowledged).
func (cp *ControlPlane) Instance(resourceID string) (Instance, bool) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	in, ok := cp.instances[resourceID]
	if !ok {
		return Instance{}, false
	}
	out := *in
	out.Heard, out.Errors = slices.Clone(in.Heard), slices.Clone(in.Errors)
	return out, true
}

// Create places a new instance of serviceType on a ready agent serving it
// and publishes the create to the agent's topic.
func (cp *ControlPlane) Create(ctx context.Context, resourceID, serviceType string, spec map[string]any) error {
	return cp.CreateOn(ctx, resourceID, "", serviceType, spec)
}

// CreateOn is Create on the agent named agentName (any, when empty), as
// a placement policy that selects that agent places it.
func (cp *ControlPlane) CreateOn(ctx context.Context, resourceID, agentName, serviceType string, spec map[string]any) error {
	cp.mu.Lock()
	in := &Instance{ResourceID: resourceID, ServiceType: serviceType, Spec: spec}
	agent, ok := cp.place(in, agentName)
	if !ok {
		cp.mu.Unlock()
		return fmt.Errorf("no ready agent %q serves %s", agentName, serviceType)
	}
	cp.instances[resourceID] = in
	cp.mu.Unlock()
	return cp.publish(ctx, agent.TopicName, TypeCreate, Request{ResourceID: resourceID, ServiceType: serviceType, Spec: spec})
}

// Delete asks the instance's agent to delete it (deleting until the agent
// acknowledges; scheduler.go publishes to the agent's topic).
func (cp *ControlPlane) Delete(ctx context.Context, resourceID string) error {
	cp.mu.Lock()
	in, ok := cp.instances[resourceID]
	if !ok {
		cp.mu.Unlock()
		return fmt.Errorf("no instance %s", resourceID)
	}
	in.Status = StatusDeleting
	topic, st := cp.topicOf(in.AgentName), in.ServiceType
	cp.mu.Unlock()
	return cp.publish(ctx, topic, TypeDelete, Request{ResourceID: resourceID, ServiceType: st})
}

// place puts in on a ready agent serving its service type that it was not
// placed on before (only the agent named only, when given), first by
// name, as pending; the caller holds cp.mu.
func (cp *ControlPlane) place(in *Instance, only string) (Agent, bool) {
	var candidates []Agent
	for _, a := range cp.agents {
		if (only == "" || a.Name == only) && a.HealthStatus == HealthReady && slices.Contains(a.ServiceTypes, in.ServiceType) && !slices.Contains(in.Excluded, a.Name) {
			candidates = append(candidates, *a)
		}
	}
	if len(candidates) == 0 {
		return Agent{}, false
	}
	slices.SortFunc(candidates, func(a, b Agent) int { return strings.Compare(a.Name, b.Name) })
	in.AgentName, in.Status, in.Since = candidates[0].Name, StatusPending, time.Now()
	return candidates[0], true
}

// topicOf is the topic of the agent named name; the caller holds cp.mu.
func (cp *ControlPlane) topicOf(name string) string {
	if a, ok := cp.agentNamed(name); ok {
		return a.TopicName
	}
	return ""
}

// publish sends a request to subject through JetStream, its CloudEvent id
// the message id (publisher.go).
func (cp *ControlPlane) publish(ctx context.Context, subject, typ string, req Request) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	e := Envelope{SpecVersion: "1.0", Type: typ, Source: Source, Subject: subject, ID: uuid.NewString(), Data: data}
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, e.ID)
	_, err = cp.js.PublishMsg(ctx, msg)
	return err
}

// response is what the response consumer reads of a response: its type,
// and of its data the resource and the agent (response_consumer.go).
type response struct {
	Type string `json:"type"`
	Data struct {
		ResourceID string `json:"resource_id"`
		AgentName  string `json:"agent_name"`
	} `json:"data"`
}

// errorData is a dcm.agent.error's data, as a test reads it.
type errorData struct {
	Data map[string]any `json:"data"`
}

// transitions are the statuses each response moves an instance from, and
// to (response_consumer.go).
var transitions = map[string]struct {
	from []string
	to   string
}{
	TypeCreationAck:   {[]string{StatusPending, StatusQueued}, StatusProvisioning},
	TypeError:         {[]string{StatusPending, StatusQueued, StatusProvisioning}, StatusFailed},
	TypeCancelAck:     {[]string{StatusQueued}, StatusCancelled},
	TypeRequestQueued: {[]string{StatusPending, StatusQueued}, StatusQueued},
}

// onResponse applies an agent's response. One without a resource or an
// agent name is discarded, and so is one from an agent the instance is no
// longer placed on, or for a status it no longer has (stale or
// duplicate); every one is acked (response_consumer.go).
func (cp *ControlPlane) onResponse(msg jetstream.Msg) {
	if subject, del := cp.apply(msg.Data()); subject != "" {
		_ = cp.publish(context.Background(), subject, TypeDelete, del)
	}
	_ = msg.Ack()
}

// apply applies a response; it returns the delete to publish next, to
// subject, when a cancel was rejected.
func (cp *ControlPlane) apply(data []byte) (subject string, del Request) {
	var r response
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err := json.Unmarshal(data, &r); err != nil {
		cp.drop("a response that is not JSON")
		return "", Request{}
	}
	switch {
	case r.Data.ResourceID == "":
		cp.drop(r.Type + " without resource_id")
		return "", Request{}
	case r.Data.AgentName == "":
		cp.drop(r.Type + " without agent_name")
		return "", Request{}
	}
	in, ok := cp.instances[r.Data.ResourceID]
	switch {
	case !ok:
		cp.drop(r.Type + " for an unknown instance " + r.Data.ResourceID)
		return "", Request{}
	case in.AgentName != r.Data.AgentName:
		cp.drop(r.Type + " from agent " + r.Data.AgentName + ", not the instance's " + in.AgentName)
		return "", Request{}
	}
	in.Heard = append(in.Heard, r.Type)
	if r.Type == TypeError {
		var e errorData
		_ = json.Unmarshal(data, &e)
		in.Errors = append(in.Errors, e.Data)
	}
	switch r.Type {
	case TypeDeletionAck:
		// A deletion asked, or one the cancel-rejected path scheduled,
		// is done: the record goes; any other is a stale duplicate.
		if in.Status == StatusDeleting || in.Status == StatusPendingDeletion {
			delete(cp.instances, in.ResourceID)
			return "", Request{}
		}
	case TypeCancelReject:
		// The agent had started: the instance is deleted instead.
		if in.Status == StatusQueued || in.Status == StatusCancelled {
			in.Status = StatusPendingDeletion
			return cp.topicOf(in.AgentName), Request{ResourceID: in.ResourceID, ServiceType: in.ServiceType}
		}
	default:
		t, known := transitions[r.Type]
		if !known {
			return "", Request{} // an unknown type is acked and forgotten
		}
		if slices.Contains(t.from, in.Status) {
			in.Status = t.to
			if r.Type == TypeRequestQueued {
				in.Since = time.Now()
			}
			return "", Request{}
		}
	}
	cp.drop(fmt.Sprintf("stale or duplicate %s for %s in status %s", r.Type, in.ResourceID, in.Status))
	return "", Request{}
}

// statusEvent is the data of a status CloudEvent (StatusEvent in
// consumer.go; output_spec in its later version).
type statusEvent struct {
	Data struct {
		ID         string         `json:"id"`
		Status     string         `json:"status"`
		Message    string         `json:"message"`
		OutputSpec map[string]any `json:"output_spec"`
	} `json:"data"`
}

// onStatus records a provider's status event: lower-cased, for whichever
// agent it comes (no agent check on this path); an event without an id,
// or for an unknown instance, is acked and dropped (consumer.go).
func (cp *ControlPlane) onStatus(msg jetstream.Msg) {
	defer func() { _ = msg.Ack() }()
	var e statusEvent
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err := json.Unmarshal(msg.Data(), &e); err != nil || e.Data.ID == "" {
		cp.drop("a status event without an id")
		return
	}
	in, ok := cp.instances[e.Data.ID]
	if !ok {
		cp.drop("a status event for an unknown instance " + e.Data.ID)
		return
	}
	in.Status, in.Message = strings.ToLower(e.Data.Status), e.Data.Message
	if e.Data.OutputSpec != nil {
		in.OutputSpec = e.Data.OutputSpec
	}
}

// cancelling marks in, a queued instance, cancelled and returns the cancel
// topic of its agent when the agent is ready to hear the cancel (the
// sweep's claimCancel and PublishCancel); the caller holds cp.mu.
func (cp *ControlPlane) cancelling(in *Instance) string {
	in.Status = StatusCancelled
	if a, ok := cp.agentNamed(in.AgentName); ok && a.HealthStatus == HealthReady {
		return a.TopicName + ".cancel"
	}
	return ""
}

// Cancel cancels a queued instance now, as the sweep does once it has
// been queued too long (without placing it elsewhere): what a test
// drives instead of waiting out the queued timeout.
func (cp *ControlPlane) Cancel(ctx context.Context, resourceID string) error {
	cp.mu.Lock()
	in, ok := cp.instances[resourceID]
	if !ok || in.Status != StatusQueued {
		cp.mu.Unlock()
		return fmt.Errorf("instance %s is not queued", resourceID)
	}
	subject, st := cp.cancelling(in), in.ServiceType
	cp.mu.Unlock()
	if subject == "" {
		return fmt.Errorf("the agent of %s is not ready", resourceID)
	}
	return cp.publish(ctx, subject, TypeCancel, Request{ResourceID: resourceID, ServiceType: st})
}

// sweepEvery runs the pending sweep every SweepInterval until ctx ends.
func (cp *ControlPlane) sweepEvery(ctx context.Context) {
	tick := time.NewTicker(cp.opts.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			cp.sweep(ctx)
		}
	}
}

// sweep re-places what agents did not act on in time (sweep.go): a
// pending request past PendingTimeout goes to another agent, without a
// cancel; a queued one past QueuedTimeout is cancelled on its agent's
// cancel topic (when the agent is ready) and goes to another. Past
// MaxRetries it fails; with no other agent it is pending again where it
// was. It also marks agents whose
// heartbeats stopped unavailable (healthcheck/monitor.go).
func (cp *ControlPlane) sweep(ctx context.Context) {
	type send struct {
		subject, typ string
		req          Request
	}
	var sends []send
	cp.mu.Lock()
	now := time.Now()
	for _, a := range cp.agents {
		if now.Sub(a.LastHeartbeat) > cp.opts.HeartbeatTimeout {
			a.HealthStatus = HealthUnavailable
		}
	}
	for _, in := range cp.instances {
		var timeout time.Duration
		switch in.Status {
		case StatusPending:
			timeout = cp.opts.PendingTimeout
		case StatusQueued:
			timeout = cp.opts.QueuedTimeout
		default:
			continue
		}
		if now.Sub(in.Since) < timeout {
			continue
		}
		if in.Status == StatusQueued {
			if subject := cp.cancelling(in); subject != "" {
				sends = append(sends, send{subject, TypeCancel, Request{ResourceID: in.ResourceID, ServiceType: in.ServiceType}})
			}
		}
		in.RetryCount++
		if in.RetryCount > cp.opts.MaxRetries {
			in.Status, in.Message = StatusFailed, "retries exhausted"
			continue
		}
		in.Excluded = append(in.Excluded, in.AgentName)
		agent, ok := cp.place(in, "")
		if !ok {
			// No other agent: it waits on its own again.
			in.Status, in.Since = StatusPending, now
			continue
		}
		sends = append(sends, send{agent.TopicName, TypeCreate, Request{ResourceID: in.ResourceID, ServiceType: in.ServiceType, Spec: in.Spec}})
	}
	cp.mu.Unlock()
	for _, s := range sends {
		_ = cp.publish(ctx, s.subject, s.typ, s.req)
	}
}
