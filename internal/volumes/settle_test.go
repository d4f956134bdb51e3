package volumes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/dcm-project/storage-gateway/internal/clusters/clusterstest"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// TestTheReconcilerSettlesEachRecordWithItsClaim: what the reconciler does
// for every combination of a record and its claim that it meets — a create
// interrupted at each step, a deletion racing a create, a claim deleted or
// replaced behind the gateway's back, another provider's claim of the same
// name.
func TestTheReconcilerSettlesEachRecordWithItsClaim(t *testing.T) {
	spec := Spec{Name: "v", Namespace: "dcm", Capacity: "1Gi", StorageClass: "fast", AccessMode: "ReadWriteOnce"}
	claim := func(uid string, edit func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		return claimFor(spec, uid, edit)
	}
	now := metav1.Now()
	deleting := func(p *corev1.PersistentVolumeClaim) {
		p.DeletionTimestamp = &now
		p.Finalizers = []string{"kubernetes.io/pvc-protection"}
	}
	foreign := func(p *corev1.PersistentVolumeClaim) {
		delete(p.Annotations, displayNameAnnotation)
		unlabelled(p)
	}
	west := func(p *corev1.PersistentVolumeClaim) { p.Labels[EnvironmentLabel] = "west" }
	otherInstallation := func(p *corev1.PersistentVolumeClaim) { p.Labels[InstallationLabel] = "another" }
	old, fresh := time.Now().Add(-time.Hour), time.Now()
	rec := func(st status.Status, uid string, created, updated time.Time) record {
		return record{EnvironmentID: "east", ID: "v", Spec: spec, Status: st, PVCUID: uid, CreateTime: created, UpdateTime: updated}
	}
	for _, tt := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim // nil: none in the cache
		rec   record
		want  settlement
	}{
		{"agreeing", claim("uid-1", nil), rec(status.Running, "uid-1", old, old), settled},
		{"being deleted as recorded", claim("uid-1", deleting), rec(status.Deleting, "uid-1", old, old), settled},
		{"a create finished after the deletion", claim("uid-1", nil), rec(status.Deleting, "uid-1", old, old), deleteUnwanted},
		{"a create that stopped before recording its claim", claim("uid-1", nil), rec(status.Provisioning, "", old, old), recordClaimUID},
		{"another provider's claim of the name", claim("uid-9", foreign), rec(status.Provisioning, "", old, old), dropForeign},
		{"a claim replaced behind the gateway's back", claim("uid-2", nil), rec(status.Running, "uid-1", old, old), recordClaimUID},
		{"an adopted claim (no display name) as recorded", claim("uid-1", foreign), rec(status.Running, "uid-1", old, old), settled},
		{"a claim made before claims named their owner, as recorded", claim("uid-1", unlabelled), rec(status.Running, "uid-1", old, old), labelOwner},
		{"such a claim, not the one recorded", claim("uid-2", unlabelled), rec(status.Running, "uid-1", old, old), recordDeleted},
		{"such a claim met by a create", claim("uid-2", unlabelled), rec(status.Provisioning, "", old, old), dropForeign},
		{"another environment's claim met by a create", claim("uid-2", west), rec(status.Provisioning, "", old, old), dropForeign},
		{"another installation's claim met by a create", claim("uid-2", otherInstallation), rec(status.Provisioning, "", old, old), dropForeign},
		{"the claim replaced by another environment's", claim("uid-2", west), rec(status.Running, "uid-1", old, old), recordDeleted},
		{"another environment's claim, after a deletion asked", claim("uid-2", west), rec(status.Deleting, "uid-1", old, old), recordDeleted},
		{"a claim deleted behind the gateway's back", nil, rec(status.Running, "uid-1", old, old), recordDeleted},
		{"a deletion done", nil, rec(status.Deleting, "uid-1", old, fresh), recordDeleted},
		{"a claim just created, not cached yet", nil, rec(status.Provisioning, "uid-1", fresh, fresh), settled},
		{"a create under way", nil, rec(status.Provisioning, "", fresh, fresh), settled},
		{"a create that stopped before its claim", nil, rec(status.Provisioning, "", old, old), completeCreate},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var objects []runtime.Object
			if tt.claim != nil {
				objects = append(objects, tt.claim)
			}
			got, pvc := settlementOf(clusterstest.New(objects...), east, tt.rec)
			if got != tt.want {
				t.Fatalf("settlement %d, want %d", got, tt.want)
			}
			if wantClaim := tt.claim != nil && got != recordDeleted; (pvc != nil) != wantClaim {
				t.Fatalf("claim returned %v, want it only when cached and the environment's or met by a create", pvc)
			}
		})
	}
}

// TestARepeatedCreateIsAnsweredOnlyWithItsOwnVolume: a create repeated
// under a recorded id gets the volume only when it asks for the same spec
// (hints left open match what was resolved) and the volume still lives.
func TestARepeatedCreateIsAnsweredOnlyWithItsOwnVolume(t *testing.T) {
	spec := Spec{Name: "v", Labels: map[string]string{}, Namespace: "dcm", Capacity: "1Gi", StorageClass: "fast",
		AccessMode: "ReadWriteOnce", VolumeMode: "Filesystem"}
	same := Request{Name: "v", Capacity: "1Gi"}
	for _, tt := range []struct {
		name    string
		st      status.Status
		req     Request
		refused string // a part of the detail; "" answered
	}{
		{"same request", status.Running, same, ""},
		{"same, provisioning", status.Provisioning, same, ""},
		{"same, with the hints resolved then", status.Running, Request{Name: "v", Capacity: "1024Mi",
			Hints: Hints{StorageClass: "fast", Namespace: "dcm", AccessMode: "ReadWriteOnce", VolumeMode: "Filesystem"}}, ""},
		{"being deleted", status.Deleting, same, "being or has been deleted"},
		{"deleted", status.Deleted, same, "being or has been deleted"},
		{"bigger", status.Running, Request{Name: "v", Capacity: "2Gi"}, "spec.capacity"},
		{"another class", status.Running, Request{Name: "v", Capacity: "1Gi", Hints: Hints{StorageClass: "slow"}}, "storage_class"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := replayRefused(record{ID: "v", Spec: spec, Status: tt.st}, tt.req)
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			fe, ok := fault.As(err)
			if !ok || fe.Kind != fault.AlreadyExists || fe.Field != "id" || !strings.Contains(fe.Detail, tt.refused) {
				t.Fatalf("replayRefused = %v, want AlreadyExists on id mentioning %q", err, tt.refused)
			}
		})
	}
}

// TestOnlyARefusalForGoodDropsACreatesRecord: the record of a create the
// cluster refused for good goes; one whose outcome is unknown stays, for a
// retry or the reconciler to complete.
func TestOnlyARefusalForGoodDropsACreatesRecord(t *testing.T) {
	claims := schema.GroupResource{Resource: "persistentvolumeclaims"}
	for _, tt := range []struct {
		name    string
		err     error
		forGood bool
	}{
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, "v", nil), true},
		{"quota", apierrors.NewForbidden(claims, "v", errors.New("exceeded quota")), true},
		{"forbidden", apierrors.NewForbidden(claims, "v", errors.New("no")), true},
		{"no namespace", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "dcm"), true},
		{"timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"unavailable", apierrors.NewServiceUnavailable("down"), false},
		{"our deadline", context.DeadlineExceeded, false},
		{"unclassified", errors.New("connection reset"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := RefusedForGood(kubernetesError(tt.err, "create the claim")); got != tt.forGood {
				t.Fatalf("RefusedForGood = %v, want %v", got, tt.forGood)
			}
		})
	}
}
