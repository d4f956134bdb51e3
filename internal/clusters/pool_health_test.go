package clusters

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultsMeetTheSpecDetectionBounds(t *testing.T) {
	o := PoolOptions{}.withDefaults()
	// A check follows SteadyHealthInterval after a good one and
	// HealthInterval after a failed one, and a failing one ends within
	// HealthTimeout. Worst cases: the cluster dies just after a good check,
	// so FailureThreshold more checks must fail; it comes back just after a
	// check started, which may still time out, and the next one succeeds.
	unreachable := detectionBound(o)
	broken := time.Duration(o.FailureThreshold-1)*o.HealthInterval + time.Duration(o.FailureThreshold)*o.HealthTimeout
	recovery := o.HealthTimeout + o.HealthInterval
	if unreachable > 70*time.Second {
		t.Errorf("a silently unreachable cluster is detected after up to %s; deploy/README.md promises 70s", unreachable)
	}
	if broken > 20*time.Second {
		t.Errorf("a cluster whose watch connection broke is detected after up to %s; deploy/README.md promises 20s", broken)
	}
	// While healthy: the checks, the permission probe and the facts'
	// listings (three requests each every ten minutes) stay within the
	// idle fleet's budget of two requests a minute.
	const probeAndFacts = 0.6
	if perMinute := time.Minute.Seconds()/o.SteadyHealthInterval.Seconds() + probeAndFacts; perMinute > 2 {
		t.Errorf("a healthy cluster costs %.2f requests a minute; at most 2", perMinute)
	}
	if recovery > 15*time.Second {
		t.Errorf("recovery is detected after up to %s; at most 15s", recovery)
	}
}

// detectionBound is the longest a dead cluster stays READY under o.
func detectionBound(o PoolOptions) time.Duration {
	return o.SteadyHealthInterval + time.Duration(o.FailureThreshold-1)*o.HealthInterval + time.Duration(o.FailureThreshold)*o.HealthTimeout
}

func TestChecksEndOnATick(t *testing.T) {
	const tick, offset = time.Second, 300 * time.Millisecond
	now := time.Date(2026, 11, 28, 10, 0, 0, 123456789, time.UTC)
	for _, d := range []time.Duration{0, time.Millisecond, tick} {
		if got := onTick(now, d, tick, offset); got != d {
			t.Errorf("onTick(%s) = %s; a pause of a tick or less is kept", d, got)
		}
	}
	for _, d := range []time.Duration{tick + time.Nanosecond, 1500 * time.Millisecond, 50 * time.Second, 50*time.Second + 876543210} {
		got := onTick(now, d, tick, offset)
		due := now.Add(got)
		if onTick := due.Add(-offset); !onTick.Equal(onTick.Truncate(tick)) || got > d || d-got >= tick {
			t.Errorf("onTick(%s) = %s, due at %s; want it shortened by less than a tick to end %s after a whole one",
				d, got, due.Format(time.StampNano), offset)
		}
	}
}

func TestTrackerStates(t *testing.T) {
	ok := func(tr *tracker) { tr.checked(checkResult{ok: true}) }
	fail := func(tr *tracker) { tr.checked(checkResult{message: "the API server did not answer within 5s"}) }
	rejected := func(tr *tracker) { tr.checked(checkResult{message: "the API server rejected the credentials"}) }
	start := func(tr *tracker) { tr.started() }
	unsynced := func(names ...string) func(*tracker) {
		return func(tr *tracker) { tr.cachesUnsynced(names) }
	}
	deadline := func(tr *tracker) { tr.deadlinePassed() }

	tests := []struct {
		name    string
		steps   []func(*tracker)
		state   HealthState
		message string
		settled bool
		synced  bool
	}{
		{"new", nil, HealthPending, "health check", false, false},
		{"one failure is below the threshold", []func(*tracker){fail}, HealthPending, "health check", false, false},
		{"threshold failures before any success", []func(*tracker){fail, fail}, HealthUnreachable, "did not answer", true, false},
		{"answered, waiting for a slot", []func(*tracker){fail, ok}, HealthPending, "at most 4", false, false},
		{"syncing", []func(*tracker){ok, start, unsynced("storageclasses")}, HealthPending, "syncing", false, false},
		{"synced", []func(*tracker){ok, start, unsynced()}, HealthReady, "synced", true, true},
		{"synced, one failure keeps READY", []func(*tracker){ok, start, unsynced(), fail}, HealthReady, "synced", true, true},
		{"synced, then down", []func(*tracker){ok, start, unsynced(), fail, fail}, HealthUnreachable, "did not answer", true, true},
		{"down, then one success", []func(*tracker){ok, start, unsynced(), fail, fail, ok}, HealthReady, "synced", true, true},
		{"credentials rejected", []func(*tracker){rejected, rejected}, HealthUnreachable, "rejected", true, false},
		{"latest failure explains", []func(*tracker){ok, start, unsynced(), fail, rejected}, HealthUnreachable, "rejected", true, true},
		{"some caches late", []func(*tracker){ok, start, unsynced("events in a", "csidrivers"), deadline}, HealthDegraded, "within 30s, still retrying: events in a, csidrivers", true, false},
		{"no cache synced", []func(*tracker){ok, start, unsynced("a", "b", "c"), deadline}, HealthUnreachable, "no cache synced within 30s", true, false},
		{"late caches catch up", []func(*tracker){ok, start, unsynced("a"), deadline, unsynced()}, HealthReady, "synced", true, true},
		{"deadline after sync is ignored", []func(*tracker){ok, start, unsynced(), deadline}, HealthReady, "synced", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := tracker{threshold: 2, syncSlots: 4, syncTimeout: 30 * time.Second, caches: 3}
			for _, step := range tt.steps {
				step(&tr)
			}
			state, message := tr.health()
			if state != tt.state || !strings.Contains(message, tt.message) {
				t.Errorf("health = %s %q, want %s containing %q", state, message, tt.state, tt.message)
			}
			if tr.settled() != tt.settled || (tr.phase == phaseSynced) != tt.synced {
				t.Errorf("settled = %v, synced = %v; want %v, %v", tr.settled(), tr.phase == phaseSynced, tt.settled, tt.synced)
			}
		})
	}
}
