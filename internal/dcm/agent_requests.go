package dcm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

// request is a request CloudEvent as the control plane publishes it: its
// id, type and data (CreatePayload, DeletePayload in
// internal/sp/messaging/types.go).
type request struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		ResourceID  string          `json:"resource_id"`
		ServiceType string          `json:"service_type"`
		Spec        json.RawMessage `json:"spec"`
	} `json:"data"`
}

// storageSpec is DCM's StorageSpec as a create request carries it.
type storageSpec struct {
	Capacity string `json:"capacity"`
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	ProviderHints struct {
		Kubernetes volumes.Hints `json:"kubernetes"`
	} `json:"provider_hints"`
}

// answer is what the gateway answers a request with: a response type and
// its data beyond the resource and the agent (status; error and details);
// retry says there is no answer yet (the request comes back later).
type answer struct {
	typ   string
	data  map[string]any
	retry bool
}

// refusal is a dcm.agent.error answer: the agent's error code and details
// as DCM's control plane reads them, and the same as an RFC 9457 problem
// whose type is DCM's problem URI for the code (for a refusal of the
// gateway's, its kind: invalid-argument, already-exists, ...) and which
// names the field at fault.
func refusal(code, details string, fe *fault.Error) answer {
	problem := map[string]any{"type": problemTypeBase + slug(code), "title": "Request refused", "status": http.StatusBadRequest, "detail": details}
	if fe != nil {
		status := fe.Kind.HTTPStatus()
		problem["type"], problem["title"], problem["status"] = problemTypeBase+kindSlugs[fe.Kind], http.StatusText(status), status
		if fe.Field != "" {
			problem["field"] = fe.Field
		}
	}
	return answer{typ: typeError, data: map[string]any{"error": code, "details": details, "problem": problem}}
}

// kindSlugs are the problem slugs of the gateway's refusals, the API's
// problem types in DCM's URI form.
var kindSlugs = map[fault.Kind]string{
	fault.InvalidArgument:    "invalid-argument",
	fault.NotFound:           "not-found",
	fault.AlreadyExists:      "already-exists",
	fault.Conflict:           "failed-precondition",
	fault.FailedPrecondition: "failed-precondition",
	fault.Unavailable:        "unavailable",
}

// slug writes an error code as a problem slug: MAX_DELIVERY_EXCEEDED is
// max-delivery-exceeded.
func slug(code string) string { return strings.ToLower(strings.ReplaceAll(code, "_", "-")) }

// doorbell rings the fetches while ctx lasts: one core NATS subscription
// to every agent topic hears each request the control plane publishes,
// and if it is for an agent this replica serves, the consumers are
// fetched from now and once more a moment later (the stream may store
// the request just after the doorbell rang). Only the owner rings, so a
// request is mostly fetched by the replica that carries it out.
func (a *Agents) doorbell(ctx context.Context) {
	sub, err := a.opts.JetStream.Conn().Subscribe(topicPrefix+">", func(m *nats.Msg) {
		if env, _, ok := agentOf(a.knownRoot(), m.Subject); ok && a.serving(env) {
			a.fetches.Add(fetchKey)
			a.fetches.AddAfter(fetchKey, doorbellAgain)
		}
	})
	if err != nil {
		a.log.ErrorContext(ctx, "listen for DCM's requests: they are fetched at each heartbeat only", "error", err)
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// agentOf is the environment whose agent a request on subject is for, and
// whether it is a cancel, if subject is an agent topic under root (an
// installation's topic root).
func agentOf(root, subject string) (env string, cancel bool, ok bool) {
	topic, cancel := strings.CutSuffix(subject, cancelSuffix)
	env, ok = strings.CutPrefix(topic, root+".")
	return env, cancel, ok && root != "" && env != "" && !strings.Contains(env, ".")
}

// fetch takes what waits on the installation's consumers, cancels first,
// up to pullBatch of each, and passes every request to its environment's
// agent: here, or handed to the replica that owns it. A full batch is
// fetched again at once.
func (a *Agents) fetch(ctx context.Context, _ string) (time.Duration, error) {
	requests, cancels, err := a.consumers(ctx)
	if err != nil {
		return 0, err
	}
	root, err := a.root(ctx)
	if err != nil {
		return 0, err
	}
	// What is served here goes to its agent in the stream's order; what
	// another replica owns is handed over after the batch, each
	// environment's in the stream's order, different environments' at once
	// (one owner slow to take its requests holds up no other).
	handOffs := map[string][]handOff{}
	defer func() {
		var wg sync.WaitGroup
		for _, hs := range handOffs {
			wg.Go(func() {
				for _, h := range hs {
					a.handOver(ctx, h)
				}
			})
		}
		wg.Wait()
	}()
	full := false
	for _, c := range []jetstream.Consumer{cancels, requests} {
		batch, err := c.FetchNoWait(pullBatch)
		if err != nil {
			a.dropConsumers() // looked up again at the next try: gone with a NATS that lost its state?
			return 0, err
		}
		n := 0
		for msg := range batch.Messages() {
			if h, ok := a.dispatch(ctx, root, msg); ok {
				handOffs[h.env] = append(handOffs[h.env], h)
			}
			n++
		}
		if err := batch.Error(); err != nil {
			a.dropConsumers()
			return 0, err
		}
		full = full || n == pullBatch
	}
	if full {
		return time.Millisecond, nil // more may wait
	}
	return 0, nil
}

// handOff is a request fetched here for environment env, which another
// replica owns.
type handOff struct {
	env  string
	msg  jetstream.Msg
	meta *jetstream.MsgMetadata
	d    delivery
}

// dispatch passes msg, fetched from the consumers of the installation
// whose topic root is root, to its environment's agent if this replica
// serves it, and otherwise returns it to be handed over.
func (a *Agents) dispatch(ctx context.Context, root string, msg jetstream.Msg) (handOff, bool) {
	env, cancel, ok := agentOf(root, msg.Subject())
	meta, err := msg.Metadata()
	if !ok || err != nil {
		a.log.WarnContext(ctx, "drop a request on no agent's topic", "subject", msg.Subject())
		_ = msg.Term()
		return handOff{}, false
	}
	d := read(msg, meta.Sequence.Stream, cancel)
	if a.deliver(env, d) {
		return handOff{}, false
	}
	return handOff{env: env, msg: msg, meta: meta, d: d}, true
}

// handOver hands h to its environment's owner. An owner that did not
// answer in time may have taken it: it is left to come back after the ack
// wait if not, rather than delivered again while the owner carries it
// out. One no owner took is delivered again shortly (and fetched again
// here), and answered as unserved at its last delivery.
func (a *Agents) handOver(ctx context.Context, h handOff) {
	err := a.sendToOwner(ctx, h.env, h.msg)
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		a.log.WarnContext(ctx, "a DCM request's owner did not say whether it took it: it comes back after the ack wait if not",
			"environment", h.env, "error", err)
	case h.meta.NumDelivered >= maxDeliver:
		a.log.WarnContext(ctx, "no replica took a DCM request in its last delivery", "environment", h.env, "error", err)
		a.unserved(ctx, h.env, h.d)
	default:
		a.log.InfoContext(ctx, "a DCM request waits for its environment's owner", "environment", h.env, "error", err)
		_ = h.msg.NakWithDelay(retryDelay)
		a.fetches.AddAfter(fetchKey, retryDelay)
	}
}

// deliver gives d to environment env's agent, if this replica serves it,
// to be carried out by the pulls.
func (a *Agents) deliver(env string, d delivery) bool {
	a.mu.Lock()
	ag := a.running[env]
	a.mu.Unlock()
	if ag == nil {
		return false
	}
	ag.inboxMu.Lock()
	ag.inbox = append(ag.inbox, d)
	ag.inboxMu.Unlock()
	a.pulls.Add(env)
	return true
}

// Headers of a request handed to its environment's owner: the
// environment, the subject it was published on and the ack subject of
// its delivery; handOffRefused in the owner's answer says it does not
// serve the environment.
const (
	handOffEnvironment = "Storage-Gateway-Environment"
	handOffSubject     = "Storage-Gateway-Subject"
	handOffAck         = "Storage-Gateway-Ack"
	handOffRefused     = "Storage-Gateway-Refused"
)

// sendToOwner hands msg, a request for environment env fetched here, to
// the replica that owns env, which carries it out and acks it.
func (a *Agents) sendToOwner(ctx context.Context, env string, msg jetstream.Msg) error {
	owner, err := a.opts.Owners.Owner(ctx, env)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, handOffTimeout)
	defer cancel()
	out := &nats.Msg{Subject: handOffPrefix + owner.Incarnation.String(), Data: msg.Data(), Header: nats.Header{}}
	out.Header.Set(handOffEnvironment, env)
	out.Header.Set(handOffSubject, msg.Subject())
	out.Header.Set(handOffAck, msg.Reply())
	reply, err := a.opts.JetStream.Conn().RequestMsgWithContext(ctx, out)
	if err != nil {
		return fmt.Errorf("hand it to replica %s: %w", owner.ID, err)
	}
	if why := reply.Header.Get(handOffRefused); why != "" {
		return fmt.Errorf("replica %s did not take it: %s", owner.ID, why)
	}
	return nil
}

// takeHandOffs takes, while ctx lasts, the requests other replicas fetched
// for the environments whose agents this replica serves: each is acked on
// the ack subject of its delivery, as if fetched here.
func (a *Agents) takeHandOffs(ctx context.Context) {
	nc := a.opts.JetStream.Conn()
	sub, err := nc.Subscribe(handOffPrefix+a.opts.Owners.Incarnation().String(), func(m *nats.Msg) {
		reply := &nats.Msg{Subject: m.Reply, Header: nats.Header{}}
		fetched := &nats.Msg{Subject: m.Header.Get(handOffSubject), Reply: m.Header.Get(handOffAck), Data: m.Data, Sub: m.Sub}
		meta, err := fetched.Metadata()
		switch {
		case err != nil:
			reply.Header.Set(handOffRefused, "no request delivery: "+err.Error())
		case !a.deliver(m.Header.Get(handOffEnvironment), read(handedOff{fetched}, meta.Sequence.Stream, strings.HasSuffix(fetched.Subject, cancelSuffix))):
			reply.Header.Set(handOffRefused, "not its agent here")
		}
		_ = nc.PublishMsg(reply)
	})
	if err != nil {
		a.log.ErrorContext(ctx, "take DCM requests other replicas fetched: they wait to be delivered again", "error", err)
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// requestMsg is a delivery of a request from the installation's
// consumers, fetched here (a jetstream.Msg) or by another replica
// (handedOff).
type requestMsg interface {
	Data() []byte
	Ack() error
	NakWithDelay(delay time.Duration) error
	InProgress() error
	Term() error
}

// handedOff is a delivery another replica fetched: acked through its
// delivery's ack subject, on this replica's connection.
type handedOff struct{ m *nats.Msg }

func (h handedOff) Data() []byte                           { return h.m.Data }
func (h handedOff) Ack() error                             { return h.m.Ack() }
func (h handedOff) NakWithDelay(delay time.Duration) error { return h.m.NakWithDelay(delay) }
func (h handedOff) InProgress() error                      { return h.m.InProgress() }
func (h handedOff) Term() error                            { return h.m.Term() }

// unserved answers a request that no replica took in its last delivery
// (its environment gone, or no longer DCM's agent) with
// MAX_DELIVERY_EXCEEDED, from the agent's default name, and ends it; a
// cancel is ended unanswered.
func (a *Agents) unserved(ctx context.Context, env string, d delivery) {
	root, err := a.root(ctx)
	if err != nil || !d.readable || d.cancel {
		_ = d.msg.Term()
		return
	}
	ag := &agent{name: environments.DefaultProviderName(env), topic: root + "." + env}
	out := refusal(errMaxDelivery, "no replica serves environment "+env+" as DCM's agent", nil)
	if err := a.respond(ctx, ag, d.req, out); err != nil {
		_ = d.msg.NakWithDelay(retryDelay)
		return
	}
	_ = d.msg.Term()
}

// pull carries out what waits for environment id's agent: its cancels
// first (a cancel of a create held here removes it before it is tried
// again), then the held requests that are due and what was fetched for it
// — those of different resources at once, those of one resource one after
// another in the stream's order. (Two requests of one resource fetched by
// different replicas at the same moment may reach the owner the other way
// round.)
// Held requests are pulled again when they are due.
func (a *Agents) pull(ctx context.Context, id string) (time.Duration, error) {
	a.mu.Lock()
	ag := a.running[id]
	a.mu.Unlock()
	if ag == nil {
		return 0, nil
	}
	var mu sync.Mutex
	var again time.Duration
	later := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if d > 0 && (again == 0 || d < again) {
			again = d
		}
	}
	inbox := ag.take()
	for _, d := range inbox {
		if d.cancel {
			later(a.cancel(ctx, id, ag, d))
		}
	}
	// Held requests due now, then the new ones, in the stream's order; a
	// held request delivered again is tried once.
	deliveries, seen := ag.due(time.Now()), map[uint64]bool{}
	for _, d := range deliveries {
		seen[d.seq] = true
	}
	for _, d := range inbox {
		if !d.cancel && !seen[d.seq] {
			deliveries = append(deliveries, d)
		}
	}
	slices.SortFunc(deliveries, func(x, y delivery) int { return cmp.Compare(x.seq, y.seq) })
	byResource := map[string][]delivery{}
	for _, d := range deliveries {
		byResource[d.req.Data.ResourceID] = append(byResource[d.req.Data.ResourceID], d)
	}
	var wg sync.WaitGroup
	for _, ds := range byResource {
		wg.Go(func() {
			for _, d := range ds {
				later(a.handle(ctx, id, ag, d))
			}
		})
	}
	wg.Wait()
	return again, nil
}

// take empties ag's inbox and returns what it held.
func (ag *agent) take() []delivery {
	ag.inboxMu.Lock()
	defer ag.inboxMu.Unlock()
	inbox := ag.inbox
	ag.inbox = nil
	return inbox
}

// delivery is a request message and what it says, read once: its place in
// the request stream, whether it is a cancel, and whether it is a request
// CloudEvent naming its resource.
type delivery struct {
	msg      requestMsg
	req      request
	seq      uint64
	cancel   bool
	readable bool
}

func read(msg requestMsg, seq uint64, cancel bool) delivery {
	d := delivery{msg: msg, seq: seq, cancel: cancel}
	d.readable = json.Unmarshal(msg.Data(), &d.req) == nil && d.req.Data.ResourceID != ""
	return d
}

// handle carries out one request placed on environment envID's agent ag
// (within ctx, the pulls' context), answers it, and acks it once the
// answer is published; a request it cannot carry out now is put back, to
// be delivered again after the delay it returns, and one past its last
// delivery is answered with an error and terminated.
func (a *Agents) handle(ctx context.Context, envID string, ag *agent, d delivery) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, min(handlerTimeout, a.opts.AckWait/2))
	defer cancel()
	msg, req := d.msg, d.req
	var out answer
	switch {
	case !d.readable:
		out = refusal(errInvalidPayload, "the request is not a CloudEvent with data.resource_id", nil)
	case req.Type != typeCreate && req.Type != typeDelete:
		_ = msg.Ack() // not a request an agent carries out (cancels come on their own topic)
		return 0
	case req.Data.ServiceType != volumes.ServiceType:
		out = refusal(errUnsupportedServiceType, "this agent serves "+volumes.ServiceType+", not "+req.Data.ServiceType, nil)
	default:
		ag.begin(req.Data.ResourceID)
		if req.Type == typeCreate {
			out = a.create(ctx, envID, ag, req)
		} else {
			out = a.delete(ctx, envID, ag, req)
		}
		if out.retry {
			return a.hold(ctx, envID, ag, d)
		}
		ag.end(req.Data.ResourceID, nil)
	}
	if err := a.respond(ctx, ag, req, out); err != nil {
		a.log.WarnContext(ctx, "answer a DCM request", "environment", envID, "volume", req.Data.ResourceID, "error", err)
		_ = msg.NakWithDelay(retryDelay)
		return retryDelay
	}
	_ = msg.Ack()
	return 0
}

// heldRequest is a request that waits here for its environment (its
// cluster unreachable or not connected yet, the database away): its
// message stays unacked, kept in progress, and is carried out when due.
type heldRequest struct {
	// delivery's seq is its place in the request stream, where a cancel
	// removes it.
	delivery
	create bool
	// tries counts the attempts so far; due is when the next one is.
	tries int
	due   time.Time
}

// hold keeps req, which the gateway could not carry out now, for another
// try: when its environment's cluster turns READY again (retryHeld), and
// otherwise after retryDelay, then every queuedDelay (within the ack
// wait: its message is kept in progress). The control plane hears once
// that a create is queued, and may cancel it meanwhile. Past maxDeliver
// tries it is answered MAX_DELIVERY_EXCEEDED and terminated. It returns
// the delay to the next try.
func (a *Agents) hold(ctx context.Context, envID string, ag *agent, d delivery) time.Duration {
	msg, req := d.msg, d.req
	resource := req.Data.ResourceID
	ag.mu.Lock()
	h := ag.held[resource]
	first := h == nil
	if first {
		h = &heldRequest{create: req.Type == typeCreate}
	}
	h.delivery, h.tries = d, h.tries+1
	delay := queuedDelay
	if h.tries == 1 {
		delay = retryDelay
	}
	delay = min(delay, a.opts.AckWait/2)
	h.due = time.Now().Add(delay)
	tries := h.tries
	ag.mu.Unlock()
	ag.end(resource, h)
	if tries >= maxDeliver {
		ag.end(resource, nil)
		out := refusal(errMaxDelivery, "the request could not be carried out in "+strconv.Itoa(maxDeliver)+" tries", nil)
		if err := a.respond(ctx, ag, req, out); err != nil {
			a.log.WarnContext(ctx, "answer a DCM request", "environment", envID, "volume", resource, "error", err)
			_ = msg.NakWithDelay(retryDelay)
			return retryDelay
		}
		_ = msg.Term()
		return 0
	}
	if first && h.create {
		if err := a.respond(ctx, ag, req, answer{typ: typeRequestQueued,
			data: map[string]any{"service_type": req.Data.ServiceType, "status": "QUEUED"}}); err != nil {
			a.log.WarnContext(ctx, "tell DCM a request is queued", "environment", envID, "volume", resource, "error", err)
		}
	}
	_ = msg.InProgress()
	return delay
}

// due returns the held requests whose next try is due at now.
func (ag *agent) due(now time.Time) []delivery {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	var out []delivery
	for _, h := range ag.held {
		if !h.due.After(now) {
			out = append(out, h.delivery)
		}
	}
	return out
}

// retryHeld makes every held request due now, and reports whether there
// was one.
func (ag *agent) retryHeld() bool {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	for _, h := range ag.held {
		h.due = time.Time{}
	}
	return len(ag.held) > 0
}

// begin marks resource's request as being carried out: a cancel meanwhile
// is rejected.
func (ag *agent) begin(resource string) {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	ag.working[resource] = true
}

// end marks resource's request no longer being carried out: done (held
// nil), or held for another try.
func (ag *agent) end(resource string, held *heldRequest) {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	delete(ag.working, resource)
	delete(ag.held, resource)
	if held != nil {
		ag.held[resource] = held
	}
}

// cancel answers a cancel of a request placed on ag: a create still
// waiting for its environment is removed from the stream — it never
// happens — and the cancel acknowledged; one being or already carried
// out (or unknown here) is rejected, and the control plane deletes what
// it made. A cancel it could not answer is put back, to be delivered again
// after the delay it returns.
func (a *Agents) cancel(ctx context.Context, envID string, ag *agent, d delivery) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, handlerTimeout)
	defer cancel()
	msg, req := d.msg, d.req
	if !d.readable || req.Type != typeCancel {
		_ = msg.Term()
		return 0
	}
	out := answer{typ: typeCancelReject, data: map[string]any{"reason": "resource already claimed"}}
	ag.mu.Lock()
	h := ag.held[req.Data.ResourceID]
	if h != nil && h.create && !ag.working[req.Data.ResourceID] {
		stream, err := a.requestStream(ctx)
		if err == nil {
			err = stream.DeleteMsg(ctx, h.seq)
		}
		if err == nil {
			delete(ag.held, req.Data.ResourceID)
			out = answer{typ: typeCancelAck, data: map[string]any{"service_type": req.Data.ServiceType}}
		}
	}
	ag.mu.Unlock()
	if err := a.respond(ctx, ag, req, out); err != nil {
		a.log.WarnContext(ctx, "answer a DCM cancel", "environment", envID, "volume", req.Data.ResourceID, "error", err)
		_ = msg.NakWithDelay(retryDelay)
		return retryDelay
	}
	a.log.InfoContext(ctx, "DCM cancelled a request", "environment", envID, "volume", req.Data.ResourceID, "answer", out.typ)
	_ = msg.Ack()
	return 0
}

// create creates the volume a create request asks for, as the API's create
// with the resource id as the volume id does: a redelivered or re-placed
// request finds the volume and answers the same.
func (a *Agents) create(ctx context.Context, envID string, ag *agent, req request) answer {
	var spec storageSpec
	err := a.opts.CheckSpec(req.Data.Spec)
	if err == nil && json.Unmarshal(req.Data.Spec, &spec) != nil {
		err = fault.Invalid("spec", "is not DCM's StorageSpec")
	}
	created := false
	if err == nil {
		_, created, err = a.opts.Volumes.Create(ctx, envID, req.Data.ResourceID, "", volumes.Request{Name: spec.Metadata.Name,
			Labels: spec.Metadata.Labels, Capacity: spec.Capacity, Hints: spec.ProviderHints.Kubernetes})
	}
	done := http.StatusOK
	if created {
		done = http.StatusCreated
	}
	return a.audited(ctx, envID, ag, req, "createVolume", err, done, answer{typ: typeCreationAck, data: map[string]any{"status": "PROVISIONING"}})
}

// delete deletes the volume a delete request names; one the environment
// does not have (never created, or gone) is acknowledged as deleted.
func (a *Agents) delete(ctx context.Context, envID string, ag *agent, req request) answer {
	err := a.opts.Volumes.Delete(ctx, envID, req.Data.ResourceID)
	if fault.Is(err, fault.NotFound) {
		return answer{typ: typeDeletionAck, data: map[string]any{"status": "DELETED"}}
	}
	return a.audited(ctx, envID, ag, req, "deleteVolume", err, http.StatusNoContent, answer{typ: typeDeletionAck, data: map[string]any{"status": "DELETING"}})
}

// audited answers a create or delete that ended with err: done when it
// succeeded (audited with status), a refusal naming the field when the
// gateway refused it, no answer yet when it could not be carried out now.
// What was done or refused is audited before it is answered.
func (a *Agents) audited(ctx context.Context, envID string, ag *agent, req request, action string, err error, status int, done answer) answer {
	out := done
	if err != nil {
		fe, ok := fault.As(err)
		if !ok || fe.Kind == fault.Unavailable {
			return answer{retry: true}
		}
		out, status = refusal(errRefused, fe.Error(), fe), fe.Kind.HTTPStatus()
	}
	if a.opts.Audit == nil {
		return out
	}
	if err := a.opts.Audit.Record(ctx, auth.AuditEvent{RequestID: req.ID, Subject: "dcm", Name: ag.name, Roles: []auth.Role{auth.RoleDCM},
		AuthMethod: auth.MethodAgentDispatch, Action: action, EnvironmentID: envID, VolumeID: req.Data.ResourceID, Status: status}); err != nil {
		return answer{retry: true} // never answered before its audit record is stored
	}
	return out
}

// respond publishes the answer to req on the response subject: a
// CloudEvent from the agent (source dcm/agents/NAME) whose data names the
// resource, the agent and its topic — the control plane drops an answer
// without agent_name — and whose id, also its Nats-Msg-Id, derives from
// the request's, so a redelivered request's answer is deduplicated.
func (a *Agents) respond(ctx context.Context, ag *agent, req request, out answer) error {
	data := map[string]any{"resource_id": req.Data.ResourceID, "agent_name": ag.name, "topic_name": ag.topic}
	maps.Copy(data, out.data)
	return a.publish(ctx, responseSubject, uuid.NewSHA1(responseIDSpace, []byte(req.ID+"/"+out.typ)).String(), out.typ, ag.name, data)
}

// publish publishes an agent's CloudEvent (source dcm/agents/NAME, its id
// also its Nats-Msg-Id) on subject through JetStream.
func (a *Agents) publish(ctx context.Context, subject, id, typ, agentName string, data map[string]any) error {
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource("dcm/agents/" + agentName)
	e.SetType(typ)
	e.SetSubject(subject)
	e.SetTime(time.Now())
	if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
		return err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	_, err = a.opts.JetStream.PublishMsg(ctx, msg)
	return err
}

// responseIDSpace makes answers' ids deterministic per request and answer.
var responseIDSpace = uuid.MustParse("0b1e7f4c-3d52-4a8e-b0c9-5f6a2d8e1c37")
