package environments

import (
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/clusters"
)

// A probe round skips only READY environments probed within the ready
// interval: any other state, or no probe yet, is probed every round.
func TestDueForProbe(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { p := at.Add(-d); return &p }
	for _, tc := range []struct {
		state clusters.State
		last  *time.Time
		due   bool
	}{
		{clusters.StateReady, ago(time.Minute), false},
		{clusters.StateReady, ago(9 * time.Minute), false},
		{clusters.StateReady, ago(10 * time.Minute), true},
		{clusters.StateReady, nil, true},
		{clusters.StateUnreachable, ago(time.Second), true},
		{clusters.StateUnauthorized, ago(time.Second), true},
		{clusters.StateDegraded, ago(time.Second), true},
		{clusters.StatePending, nil, true},
	} {
		if got := dueForProbe(Status{State: tc.state, LastProbeTime: tc.last}, 10*time.Minute, at); got != tc.due {
			t.Errorf("%s, last probe %v: due = %v, want %v", tc.state, tc.last, got, tc.due)
		}
	}
}
