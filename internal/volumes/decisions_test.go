package volumes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// TestClusterAnswersBecomeTheContractsAnswers: every way an API server can
// refuse a write is one of the answers the contract declares — never a
// bare 500 — in the gateway's own words: an Invalid answer contributes its
// field paths only, never its message.
func TestClusterAnswersBecomeTheContractsAnswers(t *testing.T) {
	claims := schema.GroupResource{Resource: "persistentvolumeclaims"}
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, "v1", field.ErrorList{
		field.Invalid(field.NewPath("spec", "resources", "requests"), "-1", "secret-looking server text"),
		field.Required(field.NewPath("spec", "accessModes"), ""),
	})
	var timeout net.Error = &net.OpError{Op: "dial", Err: errTimeout{}}
	unclassified := errors.New("something else")
	for _, tt := range []struct {
		name       string
		err        error
		kind       fault.Kind
		field      string
		mentions   []string
		retryAfter time.Duration
	}{
		{"invalid, with the fields named", invalid, fault.InvalidArgument, "spec",
			[]string{"spec.resources.requests", "spec.accessModes"}, 0},
		{"invalid, naming no field", apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, "v1", nil),
			fault.InvalidArgument, "spec", []string{"invalid fields"}, 0},
		{"a quota exceeded", apierrors.NewForbidden(claims, "v1", errors.New("exceeded quota: storage, requested: 5Gi")),
			fault.Conflict, "", []string{"ResourceQuota"}, 0},
		{"forbidden", apierrors.NewForbidden(claims, "v1", errors.New("RBAC says no")),
			fault.FailedPrecondition, "", []string{"may not create the claim"}, 0},
		{"no such namespace", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "gone"),
			fault.FailedPrecondition, "", []string{"does not exist"}, 0},
		{"changed meanwhile", apierrors.NewConflict(claims, "v1", errors.New("modified")),
			fault.Conflict, "", []string{"retry"}, 0},
		{"timed out", apierrors.NewTimeoutError("slow", 1), fault.Unavailable, "", []string{"did not answer"}, time.Second},
		{"server timeout", apierrors.NewServerTimeout(claims, "create", 1), fault.Unavailable, "", nil, time.Second},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), fault.Unavailable, "", nil, time.Second},
		{"unavailable", apierrors.NewServiceUnavailable("down"), fault.Unavailable, "", nil, time.Second},
		{"internal error", apierrors.NewInternalError(errors.New("etcd")), fault.Unavailable, "", nil, time.Second},
		{"our own deadline", fmt.Errorf("create: %w", context.DeadlineExceeded), fault.Unavailable, "", nil, time.Second},
		{"the network", timeout, fault.Unavailable, "", nil, time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := fault.As(kubernetesError(tt.err, "create the claim"))
			if !ok {
				t.Fatalf("%v was not classified", tt.err)
			}
			if got.Kind != tt.kind || got.Field != tt.field || got.RetryAfter != tt.retryAfter {
				t.Fatalf("got kind %d field %q retry after %s, want kind %d field %q retry after %s (%s)",
					got.Kind, got.Field, got.RetryAfter, tt.kind, tt.field, tt.retryAfter, got.Detail)
			}
			for _, m := range tt.mentions {
				if !strings.Contains(got.Detail, m) {
					t.Errorf("detail %q does not mention %q", got.Detail, m)
				}
			}
			if strings.Contains(got.Detail, "secret-looking") || strings.Contains(got.Detail, "RBAC says no") {
				t.Errorf("detail %q repeats the server's text", got.Detail)
			}
		})
	}
	if got := kubernetesError(unclassified, "create the claim"); !errors.Is(got, unclassified) || fault.Is(got, fault.Unavailable) {
		t.Errorf("an unclassified error became %v; it must stay itself (an internal error)", got)
	}
}

// errTimeout is a network error that timed out.
type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// TestAClaimCarriesItsVolume: the claim made for a volume is named by its
// id, labelled so the gateway and DCM find it, and gives back the spec it
// was made from; one DCM's storage SP made (no display name) is named by
// its claim; reserved and owner labels never show as the user's.
func TestAClaimCarriesItsVolume(t *testing.T) {
	spec := Spec{Name: "Orders DB", Namespace: "shop", Capacity: "5Gi", StorageClass: "fast",
		AccessMode: "ReadWriteOnce", VolumeMode: "Block", Labels: map[string]string{"team": "payments"}}
	pvc := newPVC("orders-db", spec, east)
	if pvc.Name != "orders-db" || pvc.Namespace != "shop" {
		t.Fatalf("claim %s/%s, want shop/orders-db", pvc.Namespace, pvc.Name)
	}
	for k, v := range map[string]string{clusters.ManagedByLabel: clusters.ManagedByValue, InstanceIDLabel: "orders-db",
		ServiceTypeLabel: ServiceType, "team": "payments", InstallationLabel: east.installation, EnvironmentLabel: "east"} {
		if pvc.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, pvc.Labels[k], v)
		}
	}
	if spec.Labels[InstanceIDLabel] != "" {
		t.Error("newPVC wrote its labels into the caller's spec")
	}
	if got := specOf(pvc); !reflect.DeepEqual(got, spec) {
		t.Errorf("specOf(newPVC(spec)) = %+v, want %+v", got, spec)
	}
	for _, tt := range []struct {
		name    string
		id      string
		managed bool
	}{{"its own id", "orders-db", true}, {"another id", "orders-db-2", false}} {
		if got := managedAs(pvc, tt.id); got != tt.managed {
			t.Errorf("managedAs(%s) = %v, want %v", tt.name, got, tt.managed)
		}
	}
	if !createdByGateway(pvc) {
		t.Error("the gateway's own claim is not recognised as created by the gateway")
	}

	adopted := pvc.DeepCopy()
	delete(adopted.Annotations, displayNameAnnotation)
	adopted.Spec.VolumeMode = nil
	if createdByGateway(adopted) {
		t.Error("a claim without the display name (DCM's storage SP made it) counts as the gateway's")
	}
	got := specOf(adopted)
	if got.Name != "orders-db" || got.VolumeMode != string(corev1.PersistentVolumeFilesystem) {
		t.Errorf("an adopted claim reads as name %q, volume mode %q; want its claim's name and Filesystem", got.Name, got.VolumeMode)
	}
	unlabelled := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{InstanceIDLabel: "x"}}}
	if managedAs(unlabelled, "x") {
		t.Error("a claim without the managed-by label counts as the gateway's")
	}
}

// TestWhatBlocksAnAdoption: a labelled claim becomes a volume only if its
// name is its instance id, a valid volume id, and no other environment
// records a volume of that id.
func TestWhatBlocksAnAdoption(t *testing.T) {
	claim := func(name, label string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{InstanceIDLabel: label}}}
	}
	for _, tt := range []struct {
		name     string
		pvc      *corev1.PersistentVolumeClaim
		otherEnv string
		reason   string // a part of it; "" adoptable
	}{
		{"adoptable", claim("orders", "orders"), "", ""},
		{"label and name differ", claim("orders", "billing"), "", `is "billing", not its name`},
		{"no label", claim("orders", ""), "", `is "", not its name`},
		{"not a volume id", claim("Orders_DB", "Orders_DB"), "", "not a valid volume id"},
		{"reserved id", claim("health", "health"), "", "not a valid volume id"},
		{"recorded elsewhere", claim("orders", "orders"), "west", "recorded in environment west"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := unadoptable(tt.pvc, tt.otherEnv)
			if tt.reason == "" && got != "" || tt.reason != "" && !strings.Contains(got, tt.reason) {
				t.Fatalf("unadoptable = %q, want %q", got, tt.reason)
			}
		})
	}
}

// TestTheGatewaysOwnWritesWinOverALateCache: a deletion or an expansion the
// gateway requested shows at once, though the claim in the cache has not
// caught up; once it has, the cache speaks.
func TestTheGatewaysOwnWritesWinOverALateCache(t *testing.T) {
	now := metav1.Now()
	cached := func(capacity string, deleting bool) *corev1.PersistentVolumeClaim {
		pvc := newPVC("v", Spec{Name: "v", Namespace: "ns", Capacity: capacity, StorageClass: "fast", AccessMode: "ReadWriteOnce"}, east)
		if deleting {
			pvc.DeletionTimestamp = &now
		}
		return pvc
	}
	for _, tt := range []struct {
		name         string
		recorded     status.Status
		recordedSize string
		pvc          *corev1.PersistentVolumeClaim
		wantStatus   status.Status
		wantSize     string
		wantMessage  string
	}{
		{"deletion requested, cache behind", status.Deleting, "1Gi", cached("1Gi", false), status.Deleting, "1Gi", "being deleted"},
		{"deletion seen by the cache", status.Deleting, "1Gi", cached("1Gi", true), status.Running, "1Gi", ""},
		{"expansion requested, cache behind", status.Running, "10Gi", cached("1Gi", false), status.Provisioning, "10Gi", "expansion to 10Gi requested"},
		{"expansion seen by the cache", status.Running, "10Gi", cached("10Gi", false), status.Running, "10Gi", ""},
		{"same size in other units", status.Running, "1024Mi", cached("1Gi", false), status.Running, "1Gi", ""},
		{"a record smaller than the claim", status.Running, "1Gi", cached("2Gi", false), status.Running, "2Gi", ""},
		{"a record size that does not parse", status.Running, "lots", cached("1Gi", false), status.Running, "1Gi", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := Volume{ID: "v", Spec: specOf(tt.pvc), Status: status.Running}
			rec := record{ID: "v", Status: tt.recorded, Spec: Spec{Capacity: tt.recordedSize}}
			got := withPendingWrites(v, rec, tt.pvc)
			if got.Status != tt.wantStatus || got.Spec.Capacity != tt.wantSize || !strings.Contains(got.Message, tt.wantMessage) {
				t.Fatalf("got %s %s %q, want %s %s %q", got.Status, got.Spec.Capacity, got.Message, tt.wantStatus, tt.wantSize, tt.wantMessage)
			}
		})
	}
}

// TestAVolumeWithoutItsClaimIsItsRecord: while its claim is not visible, a
// volume is what its record says, bound volume included.
func TestAVolumeWithoutItsClaimIsItsRecord(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := record{EnvironmentID: "east", ID: "v", Spec: Spec{Name: "v", Capacity: "1Gi"}, Status: status.Deleting,
		Message: "the claim is being deleted", CreateTime: created, UpdateTime: created.Add(time.Minute), VolumeName: "pv-1"}
	got := fromRecord(rec)
	if got.ID != "v" || got.EnvironmentID != "east" || got.Status != status.Deleting || got.Message != rec.Message ||
		got.VolumeName != "pv-1" || !got.CreateTime.Equal(created) || !got.UpdateTime.Equal(rec.UpdateTime) || got.Spec.Capacity != "1Gi" {
		t.Fatalf("fromRecord = %+v", got)
	}
}
