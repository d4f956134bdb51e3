package api_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	ix.SetEnvironments([]fleet.Meta{{ID: "live", Region: "r", State: "READY"}, {ID: "denied", State: "READY"}, {ID: "lost", Zone: "z"}, {ID: "empty"}})
	live := fleettest.Objects(4, 10)
	live.Quotas = []*corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "dcm"}, Status: corev1.ResourceQuotaStatus{
		Hard: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("100Gi")},
		Used: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("30Gi")},
	}}}
	ix.Observe("live", live, time.Now())
	ix.SetWritable("live", true)
	denied := fleettest.Objects(2, 10)
	denied.QuotasDenied = true
	ix.Observe("denied", denied, time.Now())
	ix.SetWritable("denied", true)
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
		"/api/v1alpha1/placements?capacity=1Gi",
		"/api/v1alpha1/placements?capacity=5Gi&access_mode=ReadWriteOnce&volume_mode=Filesystem&expandable=true&explain=true",
		"/api/v1alpha1/placements?capacity=50Gi&explain=true&region=r",
	} {
		if rec := get(t, h, path); rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
	}
}

// A placement question names what it cannot read.
func TestPlacementRefusesBadQuestions(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	h := contract.Validating(t, api.New(api.Options{Logger: logger, Metrics: prometheus.NewRegistry(), Fleet: fleet.NewIndex(),
		Auth: testAuth(t), Audit: testAudit(nil, logger)}))
	for path, field := range map[string]string{
		"/api/v1alpha1/placements":                                    "capacity",
		"/api/v1alpha1/placements?capacity=lots":                      "capacity",
		"/api/v1alpha1/placements?capacity=-1Gi":                      "capacity",
		"/api/v1alpha1/placements?capacity=1Gi&access_mode=Sometimes": "access_mode",
	} {
		rec := get(t, h, path)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), field) {
			t.Errorf("GET %s: %d %s; want 400 naming %s", path, rec.Code, rec.Body, field)
		}
	}
}
