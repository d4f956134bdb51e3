package status

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFailingForCountsOnlyRepeatedFailuresOfPendingClaims(t *testing.T) {
	old := metav1.NewTime(time.Now().Add(-20 * time.Minute))
	warning := func(reason string, count int32) []*corev1.Event {
		return []*corev1.Event{{Reason: reason, Count: count, FirstTimestamp: old}}
	}
	tests := []struct {
		name     string
		phase    corev1.PersistentVolumeClaimPhase
		warnings []*corev1.Event
		failing  bool
	}{
		{"repeated failures while pending", corev1.ClaimPending, warning(provisioningFailed, 5), true},
		{"a single failure is transient", corev1.ClaimPending, warning(provisioningFailed, 1), false},
		{"another warning", corev1.ClaimPending, warning("ExternalExpanding", 5), false},
		{"bound claims never fail provisioning", corev1.ClaimBound, warning(provisioningFailed, 5), false},
		{"no warnings", corev1.ClaimPending, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pvc := &corev1.PersistentVolumeClaim{Status: corev1.PersistentVolumeClaimStatus{Phase: tt.phase}}
			got := failingFor(pvc, tt.warnings)
			if (got > 10*time.Minute) != tt.failing {
				t.Fatalf("failingFor = %s, want failing=%v", got, tt.failing)
			}
		})
	}
}

// The sweep looks at an environment while its handlers hold a claim of it:
// claims of the same name in two namespaces are two, and the environment
// is forgotten with its last claim.
func TestTheSweepFollowsEnvironmentsHoldingClaims(t *testing.T) {
	f := NewFollower(FollowerOptions{})
	pvc := func(ns string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"}}
	}
	held := func() []string { return slices.Sorted(maps.Keys(f.claimed)) }
	f.claim("east", pvc("a"), false)
	f.claim("east", pvc("b"), false)
	f.claim("east", pvc("a"), false) // a resync, or a new connection's adds
	f.claim("west", pvc("a"), false)
	f.claim("west", pvc("a"), true)
	if got := held(); !slices.Equal(got, []string{"east"}) {
		t.Fatalf("environments swept: %v, want [east]", got)
	}
	f.claim("east", pvc("a"), true)
	if got := held(); !slices.Equal(got, []string{"east"}) {
		t.Fatalf("after one of east's two claims was deleted: %v, want [east]", got)
	}
	f.claim("east", pvc("b"), true)
	if got := held(); len(got) != 0 {
		t.Fatalf("after every claim was deleted: %v, want none", got)
	}
}
