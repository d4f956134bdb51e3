package environments

import (
	"testing"
	"time"
)

// Only a READY environment probed within the ready interval is not due: any
// other state, or no probe yet, is.
func TestDueForProbe(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { p := at.Add(-d); return &p }
	for _, tc := range []struct {
		state State
		last  *time.Time
		due   bool
	}{
		{StateReady, ago(time.Minute), false},
		{StateReady, ago(9 * time.Minute), false},
		{StateReady, ago(10 * time.Minute), true},
		{StateReady, nil, true},
		{StateUnreachable, ago(time.Second), true},
		{StateUnauthorized, ago(time.Second), true},
		{StateDegraded, ago(time.Second), true},
		{StatePending, nil, true},
	} {
		if got := dueForProbe(Status{State: tc.state, LastProbeTime: tc.last}, 10*time.Minute, at); got != tc.due {
			t.Errorf("%s, last probe %v: due = %v, want %v", tc.state, tc.last, got, tc.due)
		}
	}
}

// The next probe of a READY environment is due the ready interval after its
// last one (at least a second on); any other's an interval from now.
func TestUntilDue(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { p := at.Add(-d); return &p }
	for _, tc := range []struct {
		state State
		last  *time.Time
		want  time.Duration
	}{
		{StateReady, ago(time.Minute), 9 * time.Minute},
		{StateReady, ago(0), 10 * time.Minute},
		{StateReady, ago(11 * time.Minute), time.Second},
		{StateReady, nil, 30 * time.Second},
		{StateUnreachable, ago(time.Second), 30 * time.Second},
		{StateDegraded, ago(time.Hour), 30 * time.Second},
	} {
		if got := untilDue(Status{State: tc.state, LastProbeTime: tc.last}, 30*time.Second, 10*time.Minute, at); got != tc.want {
			t.Errorf("%s, last probe %v: due in %s, want %s", tc.state, tc.last, got, tc.want)
		}
	}
}
