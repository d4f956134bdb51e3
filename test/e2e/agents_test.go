package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dcm-project/storage-gateway/test/controlplane"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

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
			return a.Name == name && a.TopicName == "dcm.agent."+name && a.Environment == envID &&
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

	refused := uuid.NewString()
	if err := cp.Create(t.Context(), refused, "storage", spec("99999999Ei")); err != nil {
		t.Fatal(err)
	}
	c.eventually(30*time.Second, "the refused instance failed", func() bool {
		return instance(refused).Status == controlplane.StatusFailed
	})
	if n := claims(t, east, ns, refused); n != 0 {
		t.Fatalf("a refused create made %d claims", n)
	}

	if err := cp.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Minute, "the instance and its claim gone", func() bool {
		_, known := cp.Instance(id)
		return !known && claims(t, east, ns, id) == 0
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
