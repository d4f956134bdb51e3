package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	spmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/provider"
	rmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/resource_manager"
	spmclient "github.com/dcm-project/service-provider-manager/pkg/client/provider"
	rmclient "github.com/dcm-project/service-provider-manager/pkg/client/resource_manager"

	"github.com/dcm-project/storage-gateway/test/dcmtest"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// loopback is where DCM's service-provider-manager calls from in these tests.
// v0.1.0-rc.1 sends no token, so the gateway runs with auth on and this as
// SG_AUTH_DCM_TRUSTED_NETWORKS, the bridge until DCM sends tokens.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// TestEnvironmentsBecomeReadyDCMProviders runs DCM's real
// service-provider-manager: every registered environment is registered as a
// storage provider through DCM's official client and passes DCM's own
// health checks against its /health; its status records the registration;
// deleting the environment removes the provider.
func TestEnvironmentsBecomeReadyDCMProviders(t *testing.T) {
	site := startDCMSite(t, gatewaytest.Options{})
	c, g, dcm := site.client, site.gateway, site.providers
	providerIDs := map[string]string{}
	for _, cluster := range clusters {
		c.register(cluster)
		envID := cluster.Spec.Environment.ID
		c.eventually(time.Minute, "registration of "+envID, func() bool {
			_, env := c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
			id, _ := field(env, "status", "dcm_registration", "provider_id").(string)
			providerIDs[envID] = id
			return field(env, "status", "dcm_registration", "state") == "REGISTERED" && id != ""
		})
	}
	// East publishes CSIStorageCapacity objects (2Ti + 1Ti + 800Gi); west none.
	wantTotal := map[string]string{clusters[0].Spec.Environment.ID: "3872Gi", clusters[1].Spec.Environment.ID: ""}
	for envID, id := range providerIDs {
		c.eventually(time.Minute, "DCM to see "+envID+" ready", func() bool {
			got, err := dcm.GetProviderWithResponse(t.Context(), id)
			if err != nil || got.JSON200 == nil {
				return false
			}
			p := got.JSON200
			return p.HealthStatus != nil && *p.HealthStatus == "ready" && p.Name == "storage-gateway-"+envID &&
				p.ServiceType == "storage" && p.Endpoint == g.URL+volumesPath(envID) &&
				p.Metadata != nil && p.Metadata.RegionCode != nil && *p.Metadata.RegionCode == "local" &&
				totalStorage(p) == wantTotal[envID] &&
				// What DCM's manager can ask: it has no instance update.
				p.Operations != nil && slices.Equal(*p.Operations, []string{"CREATE", "READ", "DELETE"})
		})
	}

	east := clusters[0].Spec.Environment.ID
	code, body := c.do(http.MethodDelete, "/api/v1alpha1/environments/"+east, nil)
	c.want(http.StatusNoContent, code, body)
	c.eventually(time.Minute, "the provider of the deleted environment to leave DCM", func() bool {
		got, err := dcm.GetProviderWithResponse(t.Context(), providerIDs[east])
		return err == nil && got.StatusCode() == http.StatusNotFound
	})
}

// TestVolumeLoopThroughDCM: an instance created through DCM's
// resource-manager API makes DCM call the gateway, a PVC appears in the
// right cluster, and DCM's own record reaches RUNNING from the gateway's
// CloudEvents; deleting it through DCM removes the PVC and DELETED reaches
// DCM's stream. (service-provider-manager v0.1.0-rc.1 hard-deletes the
// instance record on DELETE, so its consumer drops that last event.)
func TestVolumeLoopThroughDCM(t *testing.T) {
	site := startDCMSite(t, gatewaytest.Options{})
	c, stream, instances := site.client, site.stream, site.instances
	east := clusters[0]
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace
	c.register(east)
	site.providerReady(envID)
	id := site.createInstance(envID, "through-dcm")
	if n := claims(t, east, ns, id); n != 1 {
		t.Fatalf("%d claims named %s in %s, want 1", n, id, ns)
	}
	c.eventually(time.Minute, "DCM's record RUNNING", func() bool { return site.instanceStatus(id) == "RUNNING" })

	deleted, err := instances.DeleteInstanceWithResponse(t.Context(), id, &rmapi.DeleteInstanceParams{})
	if err != nil || deleted.StatusCode() >= 300 {
		t.Fatalf("delete instance through DCM: %v %d", err, deleted.StatusCode())
	}
	c.eventually(time.Minute, "the claim gone", func() bool { return claims(t, east, ns, id) == 0 })
	// RUNNING may come twice: sent again when DCM stored its record after
	// the first (TestDCMRecordCatchesUpWithTheEventsItDropped).
	poll.Until(t, time.Minute, "PROVISIONING, RUNNING, DELETING, DELETED on DCM's stream", func() bool {
		return slices.Equal(slices.Compact(natstest.For(stream.Events(), id)), []string{"PROVISIONING", "RUNNING", "DELETING", "DELETED"})
	})
	showDeleted := true
	gone, err := instances.GetInstanceWithResponse(t.Context(), id, &rmapi.GetInstanceParams{ShowDeleted: &showDeleted})
	if err != nil || gone.StatusCode() != http.StatusNotFound {
		t.Fatalf("DCM still holds the deleted instance: %v, HTTP %d %s", err, gone.StatusCode(), gone.Body)
	}

	// DCM's calls were admitted by address, with the dcm role only, and
	// audited as such.
	for _, action := range []string{"createVolume", "deleteVolume"} {
		code, page := c.do(http.MethodGet, "/api/v1alpha1/audit-events?environment="+envID+"&action="+action, nil)
		c.want(http.StatusOK, code, page)
		events, _ := page["audit_events"].([]any)
		if len(events) != 1 {
			t.Fatalf("%s: %d audit events, want 1: %v", action, len(events), page)
		}
		e := events[0].(map[string]any)
		if e["auth_method"] != "trusted-network" || e["subject"] != "dcm-trusted-network" || e["volume_id"] != id ||
			fmt.Sprint(e["roles"]) != "[dcm]" || !strings.HasPrefix(fmt.Sprint(e["peer"]), "127.0.0.1:") {
			t.Fatalf("%s audit event: %v", action, e)
		}
	}
}

// TestDCMSeesAnUnreachableEnvironmentAsNotReady: with the gateway answering
// an unhealthy provider /health with 503 (DCM's service-provider-manager
// v0.1.0-rc.1 reads only the status code), stopping one cluster's network
// makes DCM mark that provider not ready while the other stays ready.
func TestDCMSeesAnUnreachableEnvironmentAsNotReady(t *testing.T) {
	site := startDCMSite(t, gatewaytest.Options{HealthUnhealthyCode: http.StatusServiceUnavailable})
	c, providers := site.client, site.providers
	health := map[string]func() string{}
	for _, cluster := range clusters {
		c.register(cluster)
		envID := cluster.Spec.Environment.ID
		var providerID string
		c.eventually(time.Minute, "registration of "+envID, func() bool {
			_, env := c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
			providerID, _ = field(env, "status", "dcm_registration", "provider_id").(string)
			return providerID != ""
		})
		health[envID] = func() string {
			got, err := providers.GetProviderWithResponse(t.Context(), providerID)
			if err != nil || got.JSON200 == nil || got.JSON200.HealthStatus == nil {
				return ""
			}
			return *got.JSON200.HealthStatus
		}
		c.eventually(time.Minute, envID+" ready in DCM", func() bool { return health[envID]() == "ready" })
	}
	east, west := clusters[0], clusters[1]
	east.SetReachable(false)
	defer east.SetReachable(true)
	c.eventually(time.Minute, "DCM to mark the cut environment not ready", func() bool {
		return health[east.Spec.Environment.ID]() == "not_ready" // DCM's HealthStatusNotReady
	})
	if got := health[west.Spec.Environment.ID](); got != "ready" {
		t.Fatalf("the other provider is %q in DCM, want ready", got)
	}
	east.SetReachable(true)
	c.eventually(time.Minute, "DCM to see the environment ready again", func() bool {
		return health[east.Spec.Environment.ID]() == "ready"
	})
}

// TestDCMRecordCatchesUpWithTheEventsItDropped: DCM's manager stores an
// instance only after the gateway answered its create, and drops the
// status events that come before. A proxy between DCM and the gateway holds
// each answer to a create for three seconds, so the claim is bound and
// RUNNING published before DCM has a record: DCM's record still reaches
// RUNNING, because the gateway reads it back and sends the status again.
func TestDCMRecordCatchesUpWithTheEventsItDropped(t *testing.T) {
	const hold = 3 * time.Second
	var gatewayURL atomic.Pointer[url.URL]
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(gatewayURL.Load()); r.Out.Host = r.In.Host },
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method == http.MethodPost && resp.StatusCode == http.StatusCreated {
				time.Sleep(hold)
			}
			return nil
		},
	})
	defer proxy.Close()
	site := startDCMSite(t, gatewaytest.Options{Settings: map[string]string{"SG_PUBLIC_URL": proxy.URL}})
	target, err := url.Parse(site.gateway.URL)
	if err != nil {
		t.Fatal(err)
	}
	gatewayURL.Store(target)
	east := clusters[0]
	envID := east.Spec.Environment.ID
	site.register(east)
	site.providerReady(envID)

	id := site.createInstance(envID, "held-answer")
	events := natstest.For(site.stream.Events(), id)
	if !slices.Contains(events, "RUNNING") {
		t.Fatalf("the claim was not RUNNING while its create was held (events %v): the race this test needs did not happen", events)
	}
	if got := site.instanceStatus(id); got == "RUNNING" {
		t.Fatal("DCM's record was RUNNING at once: DCM did not drop the early event")
	}
	site.eventually(time.Minute, "DCM's record RUNNING", func() bool { return site.instanceStatus(id) == "RUNNING" })
	if got := natstest.For(site.stream.Events(), id); !slices.Equal(got, []string{"PROVISIONING", "RUNNING", "RUNNING"}) {
		t.Fatalf("events %v, want RUNNING sent once more", got)
	}
}

// providerReady waits until the environment's provider is registered and
// ready in DCM.
func (s dcmSite) providerReady(envID string) {
	s.eventually(time.Minute, "the provider ready in DCM", func() bool {
		_, env := s.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
		id, _ := field(env, "status", "dcm_registration", "provider_id").(string)
		if id == "" {
			return false
		}
		got, err := s.providers.GetProviderWithResponse(s.t.Context(), id)
		return err == nil && got.JSON200 != nil && got.JSON200.HealthStatus != nil && *got.JSON200.HealthStatus == "ready"
	})
}

// createInstance creates a 1Gi instance named name through DCM on the
// environment's provider and returns its id.
func (s dcmSite) createInstance(envID, name string) string {
	t := s.t
	created, err := s.instances.CreateInstanceWithResponse(t.Context(), &rmapi.CreateInstanceParams{}, rmapi.ServiceTypeInstance{
		ProviderName: "storage-gateway-" + envID,
		Spec:         storageSpec(name, "1Gi", nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	if created.JSON201 == nil || created.JSON201.Id == nil {
		t.Fatalf("create instance through DCM: %d %s", created.StatusCode(), created.Body)
	}
	return *created.JSON201.Id
}

// instanceStatus is the status of DCM's record of an instance ("" when it
// cannot be read).
func (s dcmSite) instanceStatus(id string) string {
	showDeleted := true
	got, err := s.instances.GetInstanceWithResponse(s.t.Context(), id, &rmapi.GetInstanceParams{ShowDeleted: &showDeleted})
	if err != nil || got.JSON200 == nil || got.JSON200.Status == nil {
		return ""
	}
	return *got.JSON200.Status
}

// dcmSite is DCM's real service-provider-manager on a private NATS with
// DCM's stream, a gateway registering its environments there (DCM's calls
// admitted from loopback), and clients of both.
type dcmSite struct {
	client
	stream    *natstest.Stream
	natsURL   string
	spmURL    string
	gateway   *gatewaytest.Gateway
	providers *spmclient.ClientWithResponses
	instances *rmclient.ClientWithResponses
}

// startDCMSite starts a dcmSite for the test; opts adds to the gateway's
// options (NATS, DCM and the trusted network are set here).
func startDCMSite(t *testing.T, opts gatewaytest.Options) dcmSite {
	t.Helper()
	natsServer := natstest.Start(t)
	stream := natsServer.DCMStream()
	spm := dcmtest.Start(t, natsServer.URL)
	opts.NATSURL, opts.DCMURL, opts.TrustedNetworks = natsServer.URL, spm.URL, loopback
	g := gatewaytest.Start(t, opts)
	providers, err := spmclient.NewClientWithResponses(spm.URL)
	if err != nil {
		t.Fatal(err)
	}
	instances, err := rmclient.NewClientWithResponses(spm.URL)
	if err != nil {
		t.Fatal(err)
	}
	return dcmSite{client: client{t: t, base: g.URL, token: g.Tokens.Admin}, stream: stream, natsURL: natsServer.URL, spmURL: spm.URL, gateway: g,
		providers: providers, instances: instances}
}

func totalStorage(p *spmapi.Provider) string {
	if p.Metadata == nil || p.Metadata.Resources == nil || p.Metadata.Resources.TotalStorage == nil {
		return ""
	}
	return *p.Metadata.Resources.TotalStorage
}
