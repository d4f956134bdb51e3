package e2e

import (
	"net/http"
	"testing"
	"time"

	spmclient "github.com/dcm-project/service-provider-manager/pkg/client/provider"

	"github.com/dcm-project/storage-gateway/test/dcmtest"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

// TestEnvironmentsBecomeReadyDCMProviders runs DCM's real
// service-provider-manager: every registered environment is registered as a
// storage provider through DCM's official client and passes DCM's own
// health checks against its /health; its status records the registration;
// deleting the environment removes the provider.
func TestEnvironmentsBecomeReadyDCMProviders(t *testing.T) {
	natsServer := natstest.Start(t)
	natsServer.DCMStream()
	spm := dcmtest.Start(t, natsServer.URL)
	g := gatewaytest.Start(t, gatewaytest.Options{NATSURL: natsServer.URL, DCMURL: spm.URL})
	c := client{t: t, base: g.URL}
	dcm, err := spmclient.NewClientWithResponses(spm.URL)
	if err != nil {
		t.Fatal(err)
	}
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
	for envID, id := range providerIDs {
		c.eventually(time.Minute, "DCM to see "+envID+" ready", func() bool {
			got, err := dcm.GetProviderWithResponse(t.Context(), id)
			if err != nil || got.JSON200 == nil {
				return false
			}
			p := got.JSON200
			return p.HealthStatus != nil && *p.HealthStatus == "ready" && p.Name == "storage-gateway-"+envID &&
				p.ServiceType == "storage" && p.Endpoint == g.URL+volumesPath(envID)
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
