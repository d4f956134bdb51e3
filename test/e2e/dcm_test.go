package e2e

import (
	"net/http"
	"testing"
	"time"

	spmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/provider"
	spmclient "github.com/dcm-project/service-provider-manager/pkg/client/provider"

	"github.com/dcm-project/storage-gateway/test/dcmtest"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
)

// TestDCMSeesAnEnvironmentAsAReadyProvider runs DCM's real
// service-provider-manager: an environment registered as a storage provider
// through DCM's official client passes DCM's own health checks against the
// gateway's provider /health.
func TestDCMSeesAnEnvironmentAsAReadyProvider(t *testing.T) {
	r := startReporting(t, gatewaytest.Options{})
	spm := dcmtest.Start(t, r.nats.URL)
	dcm, err := spmclient.NewClientWithResponses(spm.URL)
	if err != nil {
		t.Fatal(err)
	}
	envID := clusters[0].Spec.Environment.ID
	operations := []string{"CREATE", "READ", "UPDATE", "DELETE"}
	resp, err := dcm.CreateProviderWithResponse(t.Context(), &spmapi.CreateProviderParams{}, spmapi.Provider{
		Name:          "storage-gateway-" + envID,
		ServiceType:   "storage",
		SchemaVersion: "v1alpha1",
		Endpoint:      r.gateway.URL + volumesPath(envID),
		Operations:    &operations,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != http.StatusCreated || resp.JSON201 == nil || resp.JSON201.Id == nil {
		t.Fatalf("register provider: %d %s", resp.StatusCode(), resp.Body)
	}
	id := *resp.JSON201.Id
	r.eventually(time.Minute, "DCM to see the provider ready", func() bool {
		got, err := dcm.GetProviderWithResponse(t.Context(), id)
		return err == nil && got.JSON200 != nil && got.JSON200.HealthStatus != nil && *got.JSON200.HealthStatus == "ready"
	})
}
