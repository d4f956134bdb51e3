package api_test

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/internal/fleet/fleettest"
	"github.com/dcm-project/storage-gateway/test/contract"
)

// The fleet answers are written by hand from pre-encoded JSON; each must
// still match the contract's schemas (contract.Validating fails the test
// otherwise), live and stale, with and without a next page.
func TestFleetAnswersMatchTheContract(t *testing.T) {
	ix := fleet.NewIndex()
	ix.SetEnvironments([]fleet.Meta{{ID: "live", Region: "r"}, {ID: "lost", Zone: "z"}, {ID: "empty"}})
	ix.Observe("live", fleettest.Objects(4, 10), time.Now())
	ix.Observe("lost", fleettest.Objects(2, 10), time.Now())
	ix.MarkStale("lost", time.Now())
	logger := slog.New(slog.DiscardHandler)
	h := contract.Validating(t, api.New(api.Options{Logger: logger, Metrics: prometheus.NewRegistry(), Fleet: ix,
		Auth: testAuth(t), Audit: testAudit(nil, logger)}))
	for _, path := range []string{
		"/api/v1alpha1/storage-classes",
		"/api/v1alpha1/storage-classes?max_page_size=1",
		"/api/v1alpha1/storage-classes?access_mode=ReadWriteOncePod&expandable=false",
		"/api/v1alpha1/environments/live/storage-classes",
		"/api/v1alpha1/environments/lost/storage-classes",
		"/api/v1alpha1/environments/empty/storage-classes",
		"/api/v1alpha1/environments/live/storage-classes/class-01",
	} {
		if rec := get(t, h, path); rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
	}
}
