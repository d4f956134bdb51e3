package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dcm-project/storage-gateway/test/controlplane"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// call sends body as JSON to the agent API and returns the status and the
// decoded answer.
func call(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func registration(name, topic string) map[string]any {
	return map[string]any{"name": name, "environment": "east", "topic_name": topic, "service_types": []string{"storage"}, "cost": "medium"}
}

// The agent API refuses what its OpenAPI document and its service refuse,
// with their problem types; registers by name (201, then 200, its health
// reset); refuses a topic another agent holds; takes heartbeats, ignoring
// one older than the last and turning the agent congested at the lag
// threshold.
func TestTheAgentAPIAnswersAsTheControlPlane(t *testing.T) {
	cp := controlplane.Start(t, controlplane.Options{NATSURL: natstest.Start(t).URL, LagThreshold: 50})
	for name, edit := range map[string]func(map[string]any){
		"no name":            func(r map[string]any) { delete(r, "name") },
		"no environment":     func(r map[string]any) { delete(r, "environment") },
		"no service types":   func(r map[string]any) { delete(r, "service_types") },
		"a topic not agents": func(r map[string]any) { r["topic_name"] = "agents.a1" },
		"an unknown cost":    func(r map[string]any) { r["cost"] = "free" },
	} {
		r := registration("a1", "dcm.agent.a1")
		edit(r)
		code, body := call(t, http.MethodPost, cp.URL+"/agents", r)
		if code != http.StatusBadRequest || body["type"] != "validation-error" {
			t.Errorf("%s: %d %v, want 400 validation-error", name, code, body)
		}
	}
	code, first := call(t, http.MethodPost, cp.URL+"/agents", registration("a1", "dcm.agent.a1"))
	if code != http.StatusCreated || first["health_status"] != "ready" || first["agent_id"] == "" {
		t.Fatalf("first registration: %d %v", code, first)
	}
	id := first["agent_id"].(string)
	code, again := call(t, http.MethodPost, cp.URL+"/agents", registration("a1", "dcm.agent.a1-moved"))
	if code != http.StatusOK || again["agent_id"] != id || again["topic_name"] != "dcm.agent.a1-moved" {
		t.Fatalf("registration again under the name: %d %v", code, again)
	}
	code, body := call(t, http.MethodPost, cp.URL+"/agents", registration("a2", "dcm.agent.a1-moved"))
	if code != http.StatusConflict || body["type"] != "conflict" {
		t.Fatalf("another agent's topic: %d %v", code, body)
	}
	beat := func(at time.Time, lag int) (int, map[string]any) {
		return call(t, http.MethodPut, cp.URL+"/agents/"+id+"/heartbeat", map[string]any{"timestamp": at, "consumer_lag": lag})
	}
	now := time.Now().Add(time.Second)
	if code, a := beat(now, 50); code != http.StatusOK || a["health_status"] != "congested" {
		t.Fatalf("a heartbeat at the lag threshold: %d %v", code, a)
	}
	if code, a := beat(now.Add(-time.Minute), 0); code != http.StatusOK || a["health_status"] != "congested" {
		t.Fatalf("an older heartbeat is ignored: %d %v", code, a)
	}
	if code, a := beat(now.Add(time.Second), 0); code != http.StatusOK || a["health_status"] != "ready" {
		t.Fatalf("a newer heartbeat with no lag: %d %v", code, a)
	}
	if code, body := call(t, http.MethodPut, cp.URL+"/agents/nobody/heartbeat", map[string]any{"timestamp": now, "consumer_lag": 0}); code != http.StatusNotFound || body["type"] != "not-found" {
		t.Fatalf("an unknown agent's heartbeat: %d %v", code, body)
	}
	if code, body := call(t, http.MethodPut, cp.URL+"/agents/"+id+"/heartbeat", map[string]any{"timestamp": now}); code != http.StatusBadRequest {
		t.Fatalf("a heartbeat without its lag: %d %v", code, body)
	}
}

// agent is a test's agent: it reads the requests on its topics and
// answers on the response subject.
type agent struct {
	t        *testing.T
	name     string
	js       jetstream.JetStream
	requests jetstream.Consumer
}

// newAgent registers name and subscribes to its topic (and its cancel
// topic) as an agent does: a durable consumer of the request stream
// filtered on each.
func newAgent(t *testing.T, cp *controlplane.ControlPlane, srv *natstest.Server, name string) *agent {
	t.Helper()
	if code, body := call(t, http.MethodPost, cp.URL+"/agents", registration(name, "dcm.agent."+name)); code != http.StatusCreated {
		t.Fatalf("register %s: %d %v", name, code, body)
	}
	js := srv.JetStream()
	c, err := js.CreateOrUpdateConsumer(t.Context(), controlplane.RequestStream, jetstream.ConsumerConfig{
		Durable: name + "-consumer", FilterSubjects: []string{"dcm.agent." + name, "dcm.agent." + name + ".cancel"}, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	return &agent{t: t, name: name, js: js, requests: c}
}

// next returns the next request the agent receives, its subject and its
// Nats-Msg-Id, acked.
func (a *agent) next() (controlplane.Envelope, controlplane.Request, string, string) {
	a.t.Helper()
	msg, err := a.requests.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		a.t.Fatalf("%s received no request: %v", a.name, err)
	}
	_ = msg.Ack()
	var e controlplane.Envelope
	var r controlplane.Request
	if err := json.Unmarshal(msg.Data(), &e); err != nil {
		a.t.Fatal(err)
	}
	if err := json.Unmarshal(e.Data, &r); err != nil {
		a.t.Fatal(err)
	}
	return e, r, msg.Subject(), msg.Headers().Get(jetstream.MsgIDHeader)
}

// respond publishes a response of typ with data.
func (a *agent) respond(typ string, data map[string]any) {
	a.t.Helper()
	body, err := json.Marshal(map[string]any{"specversion": "1.0", "type": typ, "source": "dcm/agents/" + a.name, "id": typ + time.Now().String(), "data": data})
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.js.Publish(a.t.Context(), controlplane.ResponseSubject, body); err != nil {
		a.t.Fatal(err)
	}
}

// answer answers for the tests' instance, vol-1, as the agent.
func (a *agent) answer(typ string) {
	a.t.Helper()
	a.respond(typ, map[string]any{"resource_id": "vol-1", "agent_name": a.name, "topic_name": "dcm.agent." + a.name})
}

// The requests carry what the control plane sends, as its messaging types
// write it (internal/sp/messaging/types.go), and the responses are taken
// by its consumer's rules: one without agent_name, or from an agent the
// instance is not placed on, changes nothing; an acknowledgement moves the
// instance on; a status event sets its lower-cased status and output
// spec; an acknowledged deletion forgets it.
func TestRequestsAndResponsesFollowTheControlPlanesRules(t *testing.T) {
	srv := natstest.Start(t)
	cp := controlplane.Start(t, controlplane.Options{NATSURL: srv.URL})
	a1, a2 := newAgent(t, cp, srv, "a1"), newAgent(t, cp, srv, "a2")
	spec := map[string]any{"service_type": "storage", "capacity": "1Gi", "metadata": map[string]any{"name": "data"}}
	if err := cp.Create(t.Context(), "vol-1", "storage", spec); err != nil {
		t.Fatal(err)
	}
	e, req, subject, msgID := a1.next()
	if e.SpecVersion != "1.0" || e.Type != "dcm.request.create" || e.Source != "dcm/control-plane" || subject != "dcm.agent.a1" ||
		e.Subject != subject || msgID != e.ID || e.ID == "" {
		t.Fatalf("create request %+v on %s, Nats-Msg-Id %q", e, subject, msgID)
	}
	var fields map[string]any
	if err := json.Unmarshal(e.Data, &fields); err != nil {
		t.Fatal(err)
	}
	// CreatePayload's json names.
	if got := slices.Sorted(maps.Keys(fields)); !slices.Equal(got, []string{"resource_id", "service_type", "spec"}) ||
		req.ResourceID != "vol-1" || req.ServiceType != "storage" || req.Spec["capacity"] != "1Gi" {
		t.Fatalf("create payload %s", e.Data)
	}
	status := func() string {
		in, ok := cp.Instance("vol-1")
		if !ok {
			return "gone"
		}
		return in.Status
	}
	dropped := func(n int, mention string) {
		t.Helper()
		poll.Until(t, 5*time.Second, "a response dropped: "+mention, func() bool {
			d := cp.Dropped()
			return len(d) == n && strings.Contains(d[n-1], mention)
		})
	}
	a1.respond(controlplane.TypeCreationAck, map[string]any{"resource_id": "vol-1", "topic_name": "dcm.agent.a1"})
	dropped(1, "without agent_name")
	a2.answer(controlplane.TypeCreationAck)
	dropped(2, "not the instance's a1")
	if got := status(); got != controlplane.StatusPending {
		t.Fatalf("after the dropped responses: %s, want pending", got)
	}
	a1.answer(controlplane.TypeCreationAck)
	poll.Until(t, 5*time.Second, "provisioning", func() bool { return status() == controlplane.StatusProvisioning })
	a1.answer(controlplane.TypeCreationAck)
	dropped(3, "stale or duplicate")

	status1 := map[string]any{"specversion": "1.0", "type": "dcm.status.storage", "source": "dcm/providers/x", "id": "s1",
		"data": map[string]any{"id": "vol-1", "status": "RUNNING", "message": "bound", "output_spec": map[string]any{"volume_name": "pv-1"}}}
	body, _ := json.Marshal(status1)
	if _, err := a1.js.Publish(t.Context(), "dcm.storage", body); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "running with its output spec", func() bool {
		in, _ := cp.Instance("vol-1")
		return in.Status == controlplane.StatusRunning && in.OutputSpec["volume_name"] == "pv-1"
	})
	if err := cp.Delete(t.Context(), "vol-1"); err != nil {
		t.Fatal(err)
	}
	e, req, _, _ = a1.next()
	if e.Type != "dcm.request.delete" || req.ResourceID != "vol-1" || req.Spec != nil {
		t.Fatalf("delete request %+v %s", e, e.Data)
	}
	a1.answer(controlplane.TypeDeletionAck)
	poll.Until(t, 5*time.Second, "the instance forgotten", func() bool { return status() == "gone" })
}

// The pending sweep re-places a request no agent acknowledged on another
// agent, cancels one an agent queued for too long on its cancel topic,
// and fails one whose retries ran out (internal/sp/pending/sweep.go).
func TestTheSweepReplacesWhatAgentsLeave(t *testing.T) {
	srv := natstest.Start(t)
	cp := controlplane.Start(t, controlplane.Options{NATSURL: srv.URL, PendingTimeout: 300 * time.Millisecond,
		QueuedTimeout: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond, MaxRetries: 2})
	a1, a2 := newAgent(t, cp, srv, "a1"), newAgent(t, cp, srv, "a2")
	if err := cp.Create(context.Background(), "vol-1", "storage", map[string]any{"capacity": "1Gi"}); err != nil {
		t.Fatal(err)
	}
	if e, _, _, _ := a1.next(); e.Type != controlplane.TypeCreate {
		t.Fatalf("a1 got %s", e.Type)
	}
	// a1 never answers: the create goes to a2.
	e, req, subject, _ := a2.next()
	if e.Type != controlplane.TypeCreate || subject != "dcm.agent.a2" || req.ResourceID != "vol-1" {
		t.Fatalf("re-placed create %+v on %s", e, subject)
	}
	if in, _ := cp.Instance("vol-1"); in.AgentName != "a2" || in.RetryCount != 1 {
		t.Fatalf("re-placed instance %+v", in)
	}
	// a2 queues it and then leaves it queued: it is cancelled there.
	a2.respond(controlplane.TypeRequestQueued, map[string]any{"resource_id": "vol-1", "agent_name": "a2", "topic_name": "dcm.agent.a2",
		"service_type": "storage", "status": "QUEUED"})
	e, req, subject, _ = a2.next()
	if e.Type != controlplane.TypeCancel || subject != "dcm.agent.a2.cancel" || req.ResourceID != "vol-1" || req.Spec != nil {
		t.Fatalf("cancel %+v on %s", e, subject)
	}
	poll.Until(t, 5*time.Second, "failed once its retries ran out", func() bool {
		in, _ := cp.Instance("vol-1")
		return in.Status == controlplane.StatusFailed && in.Message == "retries exhausted"
	})
}
