package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dcm-project/storage-gateway/test/controlplane"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

// agentAckWait is how soon a request a dead replica held is delivered
// again in these tests (SG_DCM_AGENT_ACK_WAIT; 2m by default).
const agentAckWait = 10 * time.Second

// TestDCMsRequestsReachEveryEnvironmentsOwner runs three replicas as DCM's
// agents for a fleet: each environment is registered once, by its owner;
// requests placed on every environment's agent are carried out, whichever
// replica was asked to register them. Then the owner of one environment
// dies in the middle of a create (its cluster write held, as by a slow
// API server): the request is delivered again to the environment's new
// owner, which answers it, and the environment has one claim for it.
func TestDCMsRequestsReachEveryEnvironmentsOwner(t *testing.T) {
	srv := natstest.Start(t)
	cp := controlplane.Start(t, controlplane.Options{NATSURL: srv.URL})
	set := newReplicaSet(t, "SG_NATS_URL="+srv.URL, "SG_DCM_AGENT_API_URL="+cp.URL, "SG_DCM_AGENT_HEARTBEAT_INTERVAL=1s",
		fmt.Sprintf("SG_DCM_AGENT_ACK_WAIT=%s", agentAckWait))
	set.startAll("a", "b", "c")
	tenants := make([][]harness.Tenant, len(clusters))
	for i, cluster := range clusters {
		var err error
		if tenants[i], err = cluster.Tenants(t.Context(), "agents", 10); err != nil {
			t.Fatal(err)
		}
	}
	registerTenants(t, set.client("a"), tenants)
	// One more environment through east's proxy, whose path the test
	// freezes below.
	east := clusters[0]
	held, err := east.Tenants(t.Context(), "agents-held", 1)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := east.TenantKubeconfig(held[0])
	if err != nil {
		t.Fatal(err)
	}
	heldEnv := "agents-held"
	c := set.client("a")
	code, body := c.do(http.MethodPost, "/api/v1alpha1/environments?id="+heldEnv, map[string]any{"kubeconfig": string(kc)})
	c.want(http.StatusCreated, code, body)
	owners := set.settled(2 * time.Minute)
	c.eventually(time.Minute, "every environment DCM's agent, ready", func() bool {
		ready := map[string]bool{}
		for _, a := range cp.Agents() {
			if a.HealthStatus == controlplane.HealthReady && a.Name == "storage-gateway-"+a.Environment {
				ready[a.Environment] = true
			}
		}
		return len(ready) == len(owners)
	})

	// A request on every environment's agent; each is carried out in the
	// environment's namespace (tenants' namespaces are their ids' tails).
	namespaceOf := func(env string) (*harness.Cluster, string) {
		if env == heldEnv {
			return east, held[0].Namespace
		}
		for _, cluster := range clusters {
			if ns, ok := strings.CutPrefix(env, cluster.Name()+"-"); ok {
				return cluster, ns
			}
		}
		t.Fatalf("no cluster for %s", env)
		return nil, ""
	}
	spec := map[string]any{"service_type": "storage", "capacity": "1Gi", "metadata": map[string]any{"name": "fleet"}}
	ids := map[string]string{}
	for env := range owners {
		if env == heldEnv {
			continue
		}
		ids[env] = uuid.NewString()
		if err := cp.CreateOn(t.Context(), ids[env], "storage-gateway-"+env, "storage", spec); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(2*time.Minute, "every environment's request carried out", func() bool {
		for _, id := range ids {
			if in, _ := cp.Instance(id); in.Status != controlplane.StatusRunning {
				return false
			}
		}
		return true
	})
	for env, id := range ids {
		if cluster, ns := namespaceOf(env); claims(t, cluster, ns, id) != 1 {
			t.Fatalf("environment %s (owned by %s) has %d claims for its request", env, owners[env], claims(t, cluster, ns, id))
		}
	}
	// The whole fleet's agents take two consumers of DCM's request stream.
	js := srv.JetStream()
	requests := installationConsumers(t, js, set)

	// A request fetched by a replica that does not own its environment is
	// handed to the owner, which carries it out: the owner of x is frozen
	// while requests for x and then y (another replica's) are published,
	// so y's owner fetches both; x's is carried out once its owner thaws,
	// with no delivery beyond the first.
	x, y := "", ""
	for env := range ids {
		for other := range ids {
			if owners[env] != owners[other] {
				x, y = env, other
			}
		}
	}
	before := requests.info().Delivered.Consumer
	handedOff := map[string]string{x: uuid.NewString(), y: uuid.NewString()}
	set.pause(owners[x], true)
	for _, env := range []string{x, y} {
		if err := cp.CreateOn(t.Context(), handedOff[env], "storage-gateway-"+env, "storage", spec); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(10*time.Second, "both requests fetched by "+owners[y], func() bool {
		ci := requests.info()
		return ci.NumPending == 0 && ci.Delivered.Consumer == before+2
	})
	set.pause(owners[x], false)
	c.eventually(time.Minute, "both requests carried out", func() bool {
		for _, id := range handedOff {
			if in, _ := cp.Instance(id); in.Status != controlplane.StatusRunning {
				return false
			}
		}
		return true
	})
	if ci := requests.info(); ci.Delivered.Consumer != before+2 || ci.NumAckPending != 0 {
		t.Fatalf("the handed-off request was delivered again: %d deliveries for 2 requests, %d unacked", ci.Delivered.Consumer-before, ci.NumAckPending)
	}
	for env, id := range handedOff {
		if cluster, ns := namespaceOf(env); claims(t, cluster, ns, id) != 1 {
			t.Fatalf("environment %s has %d claims for its handed-off request", env, claims(t, cluster, ns, id))
		}
	}

	// The owner of heldEnv dies while it carries out a create: its record
	// is written and its claim's write held on the frozen path.
	victim, id := owners[heldEnv], uuid.NewString()
	east.SetFrozen(true)
	t.Cleanup(func() { east.SetFrozen(false) })
	if err := cp.CreateOn(t.Context(), id, "storage-gateway-"+heldEnv, "storage", spec); err != nil {
		t.Fatal(err)
	}
	c.eventually(30*time.Second, "the create under way on "+victim, func() bool {
		var n int
		err := set.db.QueryRow(t.Context(), `SELECT count(*) FROM volumes WHERE environment_id = $1 AND id = $2`, heldEnv, id).Scan(&n)
		return err == nil && n == 1
	})
	set.kill(syscall.SIGKILL, victim)
	east.SetFrozen(false)
	after := set.settled(time.Minute)
	c = set.client(after[heldEnv])
	c.eventually(agentAckWait+time.Minute, "the create delivered again to "+after[heldEnv]+" and answered", func() bool {
		in, _ := cp.Instance(id)
		return in.Status == controlplane.StatusRunning
	})
	if n := claims(t, east, held[0].Namespace, id); n != 1 {
		t.Fatalf("%d claims for the create whose replica died", n)
	}
	if ci := requests.info(); ci.NumAckPending != 0 || ci.NumPending != 0 || ci.NumRedelivered != 0 {
		t.Fatalf("the request is still held: %+v", ci)
	}
	if in, _ := cp.Instance(id); slices.Contains(in.Heard, controlplane.TypeError) {
		t.Fatalf("the create was answered with an error: %v", in.Errors)
	}
	// The new owner carried it out as a replay of the dead one's (the
	// volume was there: 200), and was the only one to answer it.
	code, page := c.do(http.MethodGet, "/api/v1alpha1/audit-events?action=createVolume&environment="+heldEnv, nil)
	c.want(http.StatusOK, code, page)
	var statuses []any
	for _, e := range page["audit_events"].([]any) {
		if e := e.(map[string]any); e["volume_id"] == id && e["auth_method"] == "agent-dispatch" {
			statuses = append(statuses, e["status"])
		}
	}
	if !slices.Equal(statuses, []any{float64(http.StatusOK)}) {
		t.Fatalf("the create's audit statuses %v, want one replay (200) by the new owner", statuses)
	}
}

// consumer reads one consumer's state.
type consumer struct {
	t *testing.T
	c jetstream.Consumer
}

func (c consumer) info() *jetstream.ConsumerInfo {
	c.t.Helper()
	ci, err := c.c.Info(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	return ci
}

// installationConsumers checks that DCM's request stream has the two
// consumers of set's installation and no other, and returns the one of
// its requests.
func installationConsumers(t *testing.T, js jetstream.JetStream, set *replicaSet) consumer {
	t.Helper()
	var installation string
	if err := set.db.QueryRow(t.Context(), `SELECT id::text FROM installation`).Scan(&installation); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), controlplane.RequestStream)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range stream.ConsumerNames(t.Context()).Name() {
		names = append(names, name)
	}
	want := []string{"storage-gateway-" + installation + "-cancel-consumer", "storage-gateway-" + installation + "-consumer"}
	if slices.Sort(names); !slices.Equal(names, want) {
		t.Fatalf("DCM's request stream has the consumers %v, want %v", names, want)
	}
	c, err := stream.Consumer(t.Context(), want[1])
	if err != nil {
		t.Fatal(err)
	}
	return consumer{t, c}
}
