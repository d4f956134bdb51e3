package status

import (
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
