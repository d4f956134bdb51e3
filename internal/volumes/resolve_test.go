package volumes

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/clusters/clusterstest"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/status"
)

func class(name string, isDefault bool) *storagev1.StorageClass {
	c := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/unknown"}
	if isDefault {
		c.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
	}
	return c
}

// TestAVolumesSpecIsResolvedAgainstItsEnvironment: a create's open settings
// come from its hints, else the environment's defaults, else the cluster's
// (default class, ReadWriteOnce, Filesystem); a namespace, class or mode
// the environment or the class cannot serve is a problem naming the hint.
func TestAVolumesSpecIsResolvedAgainstItsEnvironment(t *testing.T) {
	const hints = "spec.provider_hints.kubernetes."
	rwoFilesystemOnly := capabilities.Overrides{StorageClasses: map[string]capabilities.Override{
		"local": {AccessModes: []string{"ReadWriteOnce"}, VolumeModes: []string{"Filesystem"}}}}
	env := func(defaults environments.Defaults, overrides capabilities.Overrides) environment {
		return environment{ID: "east", Spec: environments.Spec{Namespace: "dcm", AllowedNamespaces: []string{"team-a"},
			Defaults: defaults, CapabilityOverrides: overrides}}
	}
	withDefault := []runtime.Object{class("fast", true), class("local", false)}
	for _, tt := range []struct {
		name    string
		env     environment
		objects []runtime.Object
		req     Request
		want    Spec   // when no problem
		field   string // the problem's field, if one
		kind    fault.Kind
	}{
		{"the cluster's defaults", env(environments.Defaults{}, capabilities.Overrides{}), withDefault,
			Request{Name: "a", Capacity: "1Gi"},
			Spec{Name: "a", Capacity: "1Gi", Namespace: "dcm", StorageClass: "fast", AccessMode: "ReadWriteOnce", VolumeMode: "Filesystem"}, "", 0},
		{"a capacity in Kubernetes' canonical form", env(environments.Defaults{}, capabilities.Overrides{}), withDefault,
			Request{Name: "a", Capacity: "1.5Gi"},
			Spec{Name: "a", Capacity: "1536Mi", Namespace: "dcm", StorageClass: "fast", AccessMode: "ReadWriteOnce", VolumeMode: "Filesystem"}, "", 0},
		{"a fraction of a unit in Kubernetes' canonical form", env(environments.Defaults{}, capabilities.Overrides{}), withDefault,
			Request{Name: "a", Capacity: "0.5Gi"},
			Spec{Name: "a", Capacity: "512Mi", Namespace: "dcm", StorageClass: "fast", AccessMode: "ReadWriteOnce", VolumeMode: "Filesystem"}, "", 0},
		{"the environment's defaults", env(environments.Defaults{StorageClass: "local", AccessMode: "ReadWriteOncePod", VolumeMode: "Block"}, capabilities.Overrides{}),
			withDefault, Request{Name: "a", Capacity: "1Gi"},
			Spec{Name: "a", Capacity: "1Gi", Namespace: "dcm", StorageClass: "local", AccessMode: "ReadWriteOncePod", VolumeMode: "Block"}, "", 0},
		{"hints over defaults", env(environments.Defaults{StorageClass: "local", AccessMode: "ReadWriteOncePod", VolumeMode: "Filesystem"}, capabilities.Overrides{}), withDefault,
			Request{Name: "a", Capacity: "2Gi", Labels: map[string]string{"team": "a"},
				Hints: Hints{StorageClass: "fast", AccessMode: "ReadWriteMany", VolumeMode: "Block", Namespace: "team-a"}},
			Spec{Name: "a", Capacity: "2Gi", Namespace: "team-a", StorageClass: "fast", AccessMode: "ReadWriteMany", VolumeMode: "Block",
				Labels: map[string]string{"team": "a"}}, "", 0},
		{"a namespace not the environment's", env(environments.Defaults{}, capabilities.Overrides{}), withDefault,
			Request{Name: "a", Capacity: "1Gi", Hints: Hints{Namespace: "kube-system"}}, Spec{}, hints + "namespace", fault.FailedPrecondition},
		{"no class and no default", env(environments.Defaults{}, capabilities.Overrides{}), []runtime.Object{class("local", false)},
			Request{Name: "a", Capacity: "1Gi"}, Spec{}, hints + "storage_class", fault.FailedPrecondition},
		{"a class the cluster lacks", env(environments.Defaults{}, capabilities.Overrides{}), withDefault,
			Request{Name: "a", Capacity: "1Gi", Hints: Hints{StorageClass: "gold"}}, Spec{}, hints + "storage_class", fault.FailedPrecondition},
		{"a default class the cluster lacks", env(environments.Defaults{StorageClass: "gold"}, capabilities.Overrides{}), withDefault,
			Request{Name: "a", Capacity: "1Gi"}, Spec{}, hints + "storage_class", fault.FailedPrecondition},
		{"an access mode the class lacks", env(environments.Defaults{}, rwoFilesystemOnly), withDefault,
			Request{Name: "a", Capacity: "1Gi", Hints: Hints{StorageClass: "local", AccessMode: "ReadWriteMany"}}, Spec{}, hints + "access_mode", fault.FailedPrecondition},
		{"a volume mode the class lacks", env(environments.Defaults{}, rwoFilesystemOnly), withDefault,
			Request{Name: "a", Capacity: "1Gi", Hints: Hints{StorageClass: "local", VolumeMode: "Block"}}, Spec{}, hints + "volume_mode", fault.FailedPrecondition},
		{"the modes the class has", env(environments.Defaults{}, rwoFilesystemOnly), withDefault,
			Request{Name: "a", Capacity: "1Gi", Hints: Hints{StorageClass: "local"}},
			Spec{Name: "a", Capacity: "1Gi", Namespace: "dcm", StorageClass: "local", AccessMode: "ReadWriteOnce", VolumeMode: "Filesystem"}, "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolve(tt.env, clusterstest.New(tt.objects...), tt.req)
			if tt.field != "" {
				fe, ok := fault.As(err)
				if !ok || fe.Field != tt.field || fe.Kind != tt.kind {
					t.Fatalf("resolve = %+v, %v; want a problem of kind %d naming %s", got, err, tt.kind, tt.field)
				}
				return
			}
			if tt.want.Labels == nil {
				tt.want.Labels = map[string]string{}
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("resolve = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestAVolumeIsWhatItsClaimAndRecordSay: with its claim cached, a volume
// shows the claim's spec and status; without it, a record whose claim was
// seen (or is being deleted) is gone, and one created moments ago (the cache
// may lag) is its record.
func TestAVolumeIsWhatItsClaimAndRecordSay(t *testing.T) {
	bound := newPVC("bound", Spec{Name: "Bound", Namespace: "dcm", Capacity: "1Gi", StorageClass: "fast", AccessMode: "ReadWriteOnce"}, east)
	bound.Status.Phase = corev1.ClaimBound
	bound.Spec.VolumeName = "pv-1"
	pending := newPVC("pending", Spec{Name: "Pending", Namespace: "dcm", Capacity: "1Gi", StorageClass: "gone", AccessMode: "ReadWriteOnce"}, east)
	cluster := clusterstest.New(class("fast", true), bound, pending)
	old := time.Now().Add(-time.Hour)
	recorded := func(id string, st status.Status, uid string, updated time.Time) record {
		return record{EnvironmentID: "east", ID: id, Spec: Spec{Namespace: "dcm", Capacity: "1Gi"}, Status: st, PVCUID: uid, UpdateTime: updated}
	}
	for _, tt := range []struct {
		name       string
		rec        record
		wantStatus status.Status
		wantMsg    string
		notFound   bool
	}{
		{"bound claim", recorded("bound", status.Provisioning, "uid-1", old), status.Running, "", false},
		{"a claim whose class is gone", recorded("pending", status.Provisioning, "uid-2", old), status.Provisioning, "does not exist in the cluster", false},
		{"claim seen, now gone", recorded("vanished", status.Running, "uid-3", old), "", "", true},
		{"deletion requested, claim gone", recorded("deleted", status.Deleting, "", time.Now()), "", "", true},
		{"created moments ago, not cached yet", recorded("new", status.Provisioning, "uid-4", time.Now()), status.Provisioning, "", false},
		{"never had a claim", recorded("intent", status.Provisioning, "", old), status.Provisioning, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := (&Service{}).view(cluster, east, tt.rec)
			if tt.notFound {
				if !fault.Is(err, fault.NotFound) {
					t.Fatalf("view = %+v, %v; want not found", v, err)
				}
				return
			}
			if err != nil || v.Status != tt.wantStatus || !strings.Contains(v.Message, tt.wantMsg) {
				t.Fatalf("view = %s %q, %v; want %s %q", v.Status, v.Message, err, tt.wantStatus, tt.wantMsg)
			}
		})
	}
	v, _ := (&Service{}).view(cluster, east, recorded("bound", status.Provisioning, "uid-1", old))
	if v.VolumeName != "pv-1" || v.Spec.Name != "Bound" || v.Spec.StorageClass != "fast" {
		t.Errorf("a bound volume reads %+v; want its claim's spec and volume", v)
	}
}
