package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/dcm-project/storage-gateway/test/controlplane"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

// agentTopic is the form of an agent's topic: the installation's root,
// then the environment's id.
var agentTopic = regexp.MustCompile(`^dcm\.agent\.storage-gateway-[0-9a-f-]{36}\.[a-z0-9-]+$`)

// TestVolumesThroughDCMsAgentDispatch: with only DCM's agent dispatch
// configured, an environment is registered as DCM's storage agent and
// heartbeats; a create the control plane places on its topic makes the
// volume, whose status reaches the control plane as RUNNING with the bound
// volume; the same create placed again answers the same and makes nothing
// more; a spec the gateway refuses fails the instance with the field named
// and makes nothing; a delete removes the claim and the instance; every
// answer is one the control plane's consumer accepts, and each change is
// audited.
func TestVolumesThroughDCMsAgentDispatch(t *testing.T) {
	srv := natstest.Start(t)
	cp := controlplane.Start(t, controlplane.Options{NATSURL: srv.URL})
	g := gatewaytest.Start(t, gatewaytest.Options{NATSURL: srv.URL,
		Settings: map[string]string{"SG_DCM_AGENT_API_URL": cp.URL, "SG_DCM_AGENT_HEARTBEAT_INTERVAL": "1s"}})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	c.register(east)
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace
	name := "storage-gateway-" + envID
	c.eventually(30*time.Second, "the environment registered as DCM's agent, heartbeating", func() bool {
		return slices.ContainsFunc(cp.Agents(), func(a controlplane.Agent) bool {
			return a.Name == name && agentTopic.MatchString(a.TopicName) && strings.HasSuffix(a.TopicName, "."+envID) && a.Environment == envID &&
				slices.Equal(a.ServiceTypes, []string{"storage"}) && a.HealthStatus == controlplane.HealthReady
		}) && cp.Heartbeats() > 0
	})
	instance := func(id string) controlplane.Instance {
		in, _ := cp.Instance(id)
		return in
	}
	spec := func(capacity string) map[string]any {
		return map[string]any{"service_type": "storage", "capacity": capacity, "metadata": map[string]any{"name": "dispatched"}}
	}

	id := uuid.NewString()
	if err := cp.Create(t.Context(), id, "storage", spec("1Gi")); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Minute, "the instance running with its volume", func() bool {
		in := instance(id)
		return in.Status == controlplane.StatusRunning && strings.HasPrefix(in.OutputSpec["volume_name"].(string), "pvc-")
	})
	if n := claims(t, east, ns, id); n != 1 {
		t.Fatalf("%d claims for the instance", n)
	}
	// Placed again (a re-placement, a redelivery): answered the same.
	if err := cp.Create(t.Context(), id, "storage", spec("1Gi")); err != nil {
		t.Fatal(err)
	}
	c.eventually(30*time.Second, "the create placed again acknowledged", func() bool {
		return instance(id).Status == controlplane.StatusProvisioning
	})
	if n := claims(t, east, ns, id); n != 1 {
		t.Fatalf("%d claims after the create was placed again", n)
	}

	// Refused specs: by the gateway's rules (too large) and by the
	// contract's, as the API refuses them (an unknown hint). Each fails
	// its instance with the field named in a problem of DCM's type URIs.
	hinted := spec("1Gi")
	hinted["provider_hints"] = map[string]any{"kubernetes": map[string]any{"storageClassName": "standard"}}
	for field, s := range map[string]map[string]any{"spec.capacity": spec("99999999Ei"), "spec.provider_hints.kubernetes.storageClassName": hinted} {
		refused := uuid.NewString()
		if err := cp.Create(t.Context(), refused, "storage", s); err != nil {
			t.Fatal(err)
		}
		c.eventually(30*time.Second, "the refused instance failed", func() bool {
			return instance(refused).Status == controlplane.StatusFailed
		})
		if n := claims(t, east, ns, refused); n != 0 {
			t.Fatalf("a refused create made %d claims", n)
		}
		errs := instance(refused).Errors
		if len(errs) != 1 || errs[0]["error"] != "NON_RETRYABLE_SP_ERROR" || !strings.HasPrefix(errs[0]["details"].(string), field+": ") {
			t.Fatalf("refused %s with %v", field, errs)
		}
		if p, _ := errs[0]["problem"].(map[string]any); p["type"] != "https://dcm-project.github.io/problems/invalid-argument" ||
			p["field"] != field || p["status"] != float64(http.StatusBadRequest) {
			t.Fatalf("the refusal's problem %v, want DCM's invalid-argument naming %s", p, field)
		}
	}

	if err := cp.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("last seen:", last)
		}
	})
	// Gone from the control plane, or DELETED there when the volume's
	// DELETED status was read before the deletion's answer (which the
	// control plane then ignores as stale).
	c.eventually(time.Minute, "the instance and its claim gone", func() bool {
		in, known := cp.Instance(id)
		n := claims(t, east, ns, id)
		last = fmt.Sprintf("instance %q known %v (heard %v), %d claims; dropped %v", in.Status, known, in.Heard, n, cp.Dropped())
		return (!known || in.Status == controlplane.StatusDeleted) && n == 0
	})
	for _, why := range cp.Dropped() {
		if strings.Contains(why, "agent_name") || strings.Contains(why, "not the instance's") || strings.Contains(why, "resource_id") {
			t.Errorf("the control plane dropped an answer: %s", why)
		}
	}
	for action, want := range map[string]int{"createVolume": 2, "deleteVolume": 1} {
		code, page := c.do(http.MethodGet, "/api/v1alpha1/audit-events?action="+action+"&environment="+envID, nil)
		c.want(http.StatusOK, code, page)
		events, _ := page["audit_events"].([]any)
		byAgent := 0
		for _, e := range events {
			if e.(map[string]any)["auth_method"] == "agent-dispatch" {
				byAgent++
			}
		}
		if byAgent < want {
			t.Fatalf("%d %s audit events of the agent dispatch, want at least %d: %v", byAgent, action, want, events)
		}
	}
}

// TestDCMsRequestsWaitForAnUnreachableEnvironment: a create placed on the
// agent of an environment whose cluster is cut is answered
// request-queued and carried out once the cluster is back; one the
// control plane cancels meanwhile is acknowledged as cancelled and never
// happens; one it cancels after it was carried out is rejected, and
// deleted.
func TestDCMsRequestsWaitForAnUnreachableEnvironment(t *testing.T) {
	srv := natstest.Start(t)
	cp := controlplane.Start(t, controlplane.Options{NATSURL: srv.URL})
	g := gatewaytest.Start(t, gatewaytest.Options{NATSURL: srv.URL, Settings: map[string]string{"SG_DCM_AGENT_API_URL": cp.URL}})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	west := clusters[1]
	c.register(west)
	envID, ns := west.Spec.Environment.ID, west.Spec.Environment.Namespace
	c.eventually(30*time.Second, "the environment registered as DCM's agent", func() bool { return len(cp.Agents()) == 1 })
	heard := func(id, typ string) bool {
		in, _ := cp.Instance(id)
		return slices.Contains(in.Heard, typ)
	}

	health := make(chan *nats.Msg, 16)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.ChanSubscribe("dcm.agents.health", health); err != nil {
		t.Fatal(err)
	}
	west.SetReachable(false)
	t.Cleanup(func() { west.SetReachable(true) })
	c.eventually(time.Minute, "the environment unhealthy", func() bool {
		_, h := c.do(http.MethodGet, volumesPath(envID)+"/health", nil)
		return h["status"] == "unhealthy"
	})
	// The agent tells DCM its service type is unavailable, as an agent
	// does for a service provider that is.
	select {
	case msg := <-health:
		var e struct {
			Type, Source string
			Data         map[string]any
		}
		if err := json.Unmarshal(msg.Data, &e); err != nil || e.Type != "dcm.agent.health.service-type-unavailable" ||
			e.Source != "dcm/agents/storage-gateway-"+envID || e.Data["agent_name"] != "storage-gateway-"+envID ||
			e.Data["service_type"] != "storage" || msg.Header.Get("Nats-Msg-Id") == "" {
			t.Fatalf("health event %s (%v)", msg.Data, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no health event for the unreachable environment")
	}
	waiting, cancelled, started := uuid.NewString(), uuid.NewString(), uuid.NewString()
	for _, id := range []string{waiting, cancelled, started} {
		if err := cp.Create(t.Context(), id, "storage", map[string]any{"service_type": "storage", "capacity": "1Gi",
			"metadata": map[string]any{"name": "waiting"}}); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(30*time.Second, "the requests queued", func() bool {
		return heard(waiting, controlplane.TypeRequestQueued) && heard(cancelled, controlplane.TypeRequestQueued) &&
			heard(started, controlplane.TypeRequestQueued)
	})
	if err := cp.Cancel(t.Context(), cancelled); err != nil {
		t.Fatal(err)
	}
	c.eventually(30*time.Second, "the cancel acknowledged", func() bool { return heard(cancelled, controlplane.TypeCancelAck) })

	// The cluster back, the queued creates are carried out. The control
	// plane reads nothing meanwhile (its consumers lag), so one of them
	// is still queued there when its sweep cancels it: the agent, whose
	// work is done, rejects the cancel, and the control plane deletes the
	// instance through it instead.
	cp.HoldResponses(true)
	cp.HoldStatuses(true)
	west.SetReachable(true)
	c.eventually(time.Minute, "the environment healthy again", func() bool {
		_, h := c.do(http.MethodGet, volumesPath(envID)+"/health", nil)
		return h["status"] == "healthy"
	})
	back := time.Now()
	c.eventually(time.Minute, "the queued creates carried out once the cluster is back", func() bool {
		return claims(t, west, ns, waiting) == 1 && claims(t, west, ns, started) == 1
	})
	// At once, not at their next try (30 s apart).
	if took := time.Since(back); took > 10*time.Second {
		t.Fatalf("the queued creates were carried out %s after the cluster was back", took.Round(time.Millisecond))
	}
	if err := cp.Cancel(t.Context(), started); err != nil {
		t.Fatal(err)
	}
	cp.HoldResponses(false)
	c.eventually(time.Minute, "the instance whose cancel came too late deleted, and its claim", func() bool {
		_, known := cp.Instance(started)
		return !known && claims(t, west, ns, started) == 0
	})
	cp.HoldStatuses(false)
	code, page := c.do(http.MethodGet, "/api/v1alpha1/audit-events?action=deleteVolume&environment="+envID, nil)
	c.want(http.StatusOK, code, page)
	if !slices.ContainsFunc(page["audit_events"].([]any), func(e any) bool {
		return e.(map[string]any)["volume_id"] == started && e.(map[string]any)["auth_method"] == "agent-dispatch"
	}) {
		t.Fatalf("no delete of %s through the agent after its cancel was rejected: %v", started, page["audit_events"])
	}
	c.eventually(time.Minute, "the other queued create running", func() bool {
		in, _ := cp.Instance(waiting)
		return in.Status == controlplane.StatusRunning && slices.Contains(in.Heard, controlplane.TypeCreationAck)
	})
	if n := claims(t, west, ns, waiting); n != 1 {
		t.Fatalf("%d claims for the queued create", n)
	}
	if n := claims(t, west, ns, cancelled); n != 0 || heard(cancelled, controlplane.TypeCreationAck) {
		t.Fatalf("the cancelled create was carried out: %d claims, heard %v", n, func() []string { in, _ := cp.Instance(cancelled); return in.Heard }())
	}
	if in, _ := cp.Instance(cancelled); in.Status != controlplane.StatusCancelled {
		t.Fatalf("the cancelled instance is %s", in.Status)
	}
}

// TestDCMReplacesARequestNoAgentAnswers: an environment that stops
// registering with DCM stops consuming its agent's requests; one the
// control plane places on it meanwhile is re-placed by its pending sweep
// on the other environment's agent, which carries it out.
func TestDCMReplacesARequestNoAgentAnswers(t *testing.T) {
	srv := natstest.Start(t)
	cp := controlplane.Start(t, controlplane.Options{NATSURL: srv.URL, PendingTimeout: 3 * time.Second, SweepInterval: 500 * time.Millisecond})
	g := gatewaytest.Start(t, gatewaytest.Options{NATSURL: srv.URL,
		Settings: map[string]string{"SG_DCM_AGENT_API_URL": cp.URL, "SG_DCM_AGENT_HEARTBEAT_INTERVAL": "1s"}})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east, west := clusters[0], clusters[1]
	c.register(east)
	c.register(west)
	c.eventually(30*time.Second, "both environments registered as agents", func() bool { return len(cp.Agents()) == 2 })
	eastID := east.Spec.Environment.ID
	code, body := c.do(http.MethodPatch, "/api/v1alpha1/environments/"+eastID, map[string]any{"dcm": map[string]any{"register": false}})
	c.want(http.StatusOK, code, body)
	// The gateway no longer serves east's agent (its heartbeats stop), which
	// stays ready in DCM until they are missed for a minute: the create is
	// placed on it (the first by name) and nobody answers.
	c.eventually(30*time.Second, "east's heartbeats stopped", func() bool {
		for _, a := range cp.Agents() {
			if a.Name == "storage-gateway-"+eastID {
				return time.Since(a.LastHeartbeat) > 3*time.Second
			}
		}
		return false
	})
	id := uuid.NewString()
	if err := cp.Create(t.Context(), id, "storage", map[string]any{"service_type": "storage", "capacity": "1Gi",
		"metadata": map[string]any{"name": "replaced"}}); err != nil {
		t.Fatal(err)
	}
	if in, _ := cp.Instance(id); in.AgentName != "storage-gateway-"+eastID {
		t.Fatalf("placed on %s", in.AgentName)
	}
	c.eventually(time.Minute, "re-placed on west's agent and running", func() bool {
		in, _ := cp.Instance(id)
		return in.AgentName == "storage-gateway-"+west.Spec.Environment.ID && in.Status == controlplane.StatusRunning && in.RetryCount == 1
	})
	if n := claims(t, west, west.Spec.Environment.Namespace, id); n != 1 {
		t.Fatalf("%d claims in west", n)
	}
	if n := claims(t, east, east.Spec.Environment.Namespace, id); n != 0 {
		t.Fatalf("%d claims in east, whose agent no longer serves", n)
	}
}
