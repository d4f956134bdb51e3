package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// memRecorder records what the tracker writes, with the time of each write
// (fake time inside a synctest bubble), and, like the database, says a
// volume whose DELETED it recorded is gone. The database's own rules are
// tested against Postgres in TestRecorderNeverRevivesADeletedVolume.
type memRecorder struct {
	mu      sync.Mutex
	got     []Observation
	at      []time.Time
	deleted map[string]bool
	fail    bool
}

func (r *memRecorder) record(_ context.Context, o Observation) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return errors.New("the database refuses")
	}
	if r.deleted[o.VolumeID] {
		return ErrGone
	}
	if o.Status == Deleted {
		if r.deleted == nil {
			r.deleted = map[string]bool{}
		}
		r.deleted[o.VolumeID] = true
	}
	r.got, r.at = append(r.got, o), append(r.at, time.Now())
	return nil
}

// statuses lists what was recorded for a volume, in order.
func (r *memRecorder) statuses(volumeID string) []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Status
	for _, o := range r.got {
		if o.VolumeID == volumeID {
			out = append(out, o.Status)
		}
	}
	return out
}

// advance moves the bubble's fake clock on by d (no wall time passes) and
// waits until every goroutine in it is idle: coalescing that ended
// meanwhile has queued, and the writer has recorded.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// want fails the test unless exactly want was recorded for volumeID, in
// order.
func (r *memRecorder) want(t *testing.T, volumeID string, want ...Status) {
	t.Helper()
	if got := r.statuses(volumeID); !slices.Equal(got, want) {
		t.Fatalf("%s: recorded %v, want %v", volumeID, got, want)
	}
}

func observe(tr *Tracker, volumeID string, st Status) {
	tr.Observe(Observation{EnvironmentID: "env", VolumeID: volumeID, Status: st, Message: string(st)})
}

// newTracker starts a tracker inside the calling bubble, closed when the
// test ends.
func newTracker(t *testing.T, r *memRecorder, window time.Duration) *Tracker {
	tr := NewTracker(TrackerOptions{Record: r.record, Window: window, Logger: slog.New(slog.DiscardHandler)})
	go tr.Run()
	t.Cleanup(func() { tr.Close(context.Background()) })
	return tr
}

// window is the flap window of the tests' trackers (the production default).
const window = 500 * time.Millisecond

// settled is a tracker whose volume has been RUNNING for a while (its flap
// tokens are back).
func settled(t *testing.T, r *memRecorder, volumeID string) *Tracker {
	tr := newTracker(t, r, window)
	observe(tr, volumeID, Provisioning)
	observe(tr, volumeID, Running)
	advance(2 * window)
	return tr
}

// held is how many volumes the tracker holds as its next observation sees
// it: with what its writer learned (volumes the database says are gone)
// applied, which the writer hands over without waiting for the lock.
func held(tr *Tracker) int {
	n := 0
	tr.locked(volumeKey{}, func(volumeKey, *volume) { n = len(tr.volumes) })
	return n
}

// flap flips a settled volume's status ten times, 20 ms apart, starting
// with PROVISIONING (a resize) and ending on RUNNING when endRunning.
func flap(tr *Tracker, volumeID string, endRunning bool) {
	for i := range 10 {
		st := map[bool]Status{true: Provisioning, false: Running}[i%2 == 0]
		if i == 9 && !endRunning {
			st = Provisioning
		}
		observe(tr, volumeID, st)
		advance(20 * time.Millisecond)
	}
}

// A flapping claim (10 flips in 200 ms) reaches DCM at most three times
// per burst, the last time with its final status; one that ends where it
// started, twice.
func TestTrackerCalmsFlapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := settled(t, &r, "back")
		flap(tr, "back", true)
		advance(time.Second)
		r.want(t, "back", Provisioning, Running, Provisioning, Running) // the create, then the burst: 2

		tr = settled(t, &r, "away")
		flap(tr, "away", false)
		advance(time.Second)
		r.want(t, "away", Provisioning, Running, Provisioning, Running, Provisioning) // the burst: 3, the last its final status
	})
}

// A claim that keeps flapping is recorded once per window at most, with
// the status it has when the window ends.
func TestTrackerCoalescesOngoingFlapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := settled(t, &r, "restless")
		for i := range 100 { // 2 s of flips every 20 ms
			observe(tr, "restless", map[bool]Status{true: Provisioning, false: Running}[i%2 == 0])
			advance(20 * time.Millisecond)
		}
		advance(time.Second)
		got := r.statuses("restless")[2:] // after the create
		t.Logf("2 s of flapping recorded as %v", got)
		if len(got) > 2+4 {
			t.Fatalf("2 s of flapping recorded %d times; want two changes, then at most one per 500 ms window", len(got))
		}
		if got[len(got)-1] != Running {
			t.Fatalf("flapping that ended RUNNING recorded %v last", got[len(got)-1])
		}
	})
}

// A volume's forward lifecycle is recorded the moment each step is
// observed, however fast the steps follow each other: RUNNING the moment
// the claim binds right after PROVISIONING, and a quick deletion.
func TestTrackerRecordsTheLifecycleAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := newTracker(t, &r, 500*time.Millisecond)
		start := time.Now()
		for _, st := range []Status{Provisioning, Running, Deleting, Deleted} {
			observe(tr, "quick", st)
			advance(10 * time.Millisecond)
		}
		r.want(t, "quick", Provisioning, Running, Deleting, Deleted)
		for i, at := range r.at {
			if want := start.Add(time.Duration(i) * 10 * time.Millisecond); at != want {
				t.Fatalf("step %d recorded %s after the start, want at once (%s)", i, at.Sub(start), want.Sub(start))
			}
		}

		failing := newTracker(t, &r, 500*time.Millisecond)
		observe(failing, "failing", Provisioning)
		observe(failing, "failing", Failed)
		synctest.Wait()
		r.want(t, "failing", Provisioning, Failed)
	})
}

// A deletion is recorded at once even while flapping is coalesced, and
// what the coalescing held is dropped; a stale observation afterwards (a
// sweep that raced the deletion) is refused by the database as gone, and
// the tracker forgets the volume.
func TestTrackerDeletionEndsCoalescing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := settled(t, &r, "doomed")
		observe(tr, "doomed", Provisioning)
		observe(tr, "doomed", Running)
		observe(tr, "doomed", Provisioning) // no token: coalescing
		observe(tr, "doomed", Deleted)
		synctest.Wait()
		r.want(t, "doomed", Provisioning, Running, Provisioning, Running, Deleted)
		observe(tr, "doomed", Running) // stale
		advance(window)
		r.want(t, "doomed", Provisioning, Running, Provisioning, Running, Deleted)
		if kept := held(tr); kept != 0 {
			t.Fatalf("the tracker still holds %d volumes after the only one was deleted", kept)
		}
	})
}

// A claim flapping between RUNNING and FAILED is calmed like any other.
func TestTrackerCalmsFailedFlapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := settled(t, &r, "shaky")
		for i := range 10 {
			observe(tr, "shaky", map[bool]Status{true: Failed, false: Running}[i%2 == 0])
			advance(20 * time.Millisecond)
		}
		advance(time.Second)
		if got := r.statuses("shaky")[2:]; len(got) > 3 || got[len(got)-1] != Running {
			t.Fatalf("10 flips between RUNNING and FAILED recorded %v; want at most 3, the last RUNNING", got)
		}
	})
}

// A change back after a quiet period (an expansion) is recorded at once;
// an unchanged status is never recorded again.
func TestTrackerReportsRealTransitionsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := settled(t, &r, "steady")
		observed := time.Now()
		observe(tr, "steady", Provisioning) // expanding
		observe(tr, "steady", Running)
		synctest.Wait()
		r.want(t, "steady", Provisioning, Running, Provisioning, Running)
		if r.at[2] != observed || r.at[3] != observed {
			t.Fatalf("the expansion recorded at %v; want at once (%v)", r.at[2:], observed)
		}
		observe(tr, "steady", Running)
		advance(700 * time.Millisecond)
		r.want(t, "steady", Provisioning, Running, Provisioning, Running) // an unchanged status is not recorded again
	})
}

// Close records what coalescing still holds.
func TestTrackerCloseFlushesPendingTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := NewTracker(TrackerOptions{Record: r.record, Window: time.Hour, Logger: slog.New(slog.DiscardHandler)})
		go tr.Run()
		observe(tr, "closing", Running)      // spends a token
		observe(tr, "closing", Provisioning) // spends the other
		observe(tr, "closing", Running)      // no token for an hour: pending
		synctest.Wait()
		r.want(t, "closing", Running, Provisioning)
		tr.Close(context.Background())
		r.want(t, "closing", Running, Provisioning, Running)
	})
}

// stuck is a database that never answers.
func stuck(ctx context.Context, _ Observation) error { <-ctx.Done(); return ctx.Err() }

// Close gives up at its deadline: a writer stuck on the database is
// cancelled, and Close returns.
func TestTrackerCloseKeepsItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(TrackerOptions{Record: stuck, Window: time.Hour, Logger: slog.New(slog.DiscardHandler)})
		go tr.Run()
		observe(tr, "slow", Provisioning)
		observe(tr, "slow", Running) // held by the window, flushed by Close
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		tr.Close(ctx)
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("Close took %s with a 2s deadline", took)
		}
	})
}

// Close keeps its deadline also when the queue is full and an observer
// waits for room holding the lock Close needs. (Real time: a goroutine
// waiting for a mutex does not let synctest's clock move.)
func TestTrackerCloseKeepsItsDeadlineWithAFullQueue(t *testing.T) {
	tr := NewTracker(TrackerOptions{Record: stuck, Window: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	go tr.Run()
	var observer sync.WaitGroup
	full := make(chan struct{})
	observer.Go(func() {
		for i := range queueSize + 10 { // more than the queue holds: blocks
			if i == queueSize+1 {
				close(full) // the writer holds one, the queue the rest
			}
			observe(tr, fmt.Sprint("vol-", i), Provisioning)
		}
	})
	<-full
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	closed := make(chan struct{})
	go func() { defer close(closed); tr.Close(ctx) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("Close still waiting 10 s after its %s deadline: the observer and Close wait for each other", deadline)
	}
	if took := time.Since(start); took > deadline+time.Second {
		t.Fatalf("Close took %s with a %s deadline", took, deadline)
	}
	observer.Wait()
}

// Repeats of the current status (resyncs, sweeps every 50 ms) spend no
// flap token: a real change is still recorded at once.
func TestTrackerRepeatsDoNotHoldBackTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := newTracker(t, &r, 500*time.Millisecond)
		current := Running
		var mu sync.Mutex
		ctx, cancel := context.WithCancel(context.Background())
		sweeps := time.NewTicker(50 * time.Millisecond)
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-sweeps.C:
					mu.Lock()
					observe(tr, "swept", current)
					mu.Unlock()
				}
			}
		})
		advance(1200 * time.Millisecond)
		for range 3 {
			mu.Lock()
			current = map[Status]Status{Running: Provisioning, Provisioning: Running}[current]
			changed := time.Now()
			observe(tr, "swept", current)
			mu.Unlock()
			synctest.Wait()
			if r.at[len(r.at)-1] != changed {
				t.Fatalf("the change to %s was recorded %s late, behind repeats", current, r.at[len(r.at)-1].Sub(changed))
			}
			advance(700 * time.Millisecond)
		}
		cancel()
		wg.Wait()
		sweeps.Stop()
	})
}

// A database that refuses every write while the queue is full must not
// wedge the tracker: failed writes are forgotten without waiting for the
// observer that is waiting for the writer, and written again when seen
// again.
func TestTrackerSurvivesAFullQueueOfFailingWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := memRecorder{fail: true}
		tr := newTracker(t, &r, time.Hour)
		for i := range 5000 { // more than the queue holds
			tr.Observe(Observation{EnvironmentID: "env", VolumeID: fmt.Sprint("vol-", i), Status: Provisioning})
		}
		synctest.Wait()
		r.mu.Lock()
		r.fail = false
		r.mu.Unlock()
		tr.Observe(Observation{EnvironmentID: "env", VolumeID: "vol-1", Status: Provisioning})
		advance(time.Hour)               // its window closes
		r.want(t, "vol-1", Provisioning) // failed before, written when seen again
	})
}

// TestTrackerForgetsDeletedVolumes: rounds of 10,000 volume lifecycles leave
// nothing behind once each DELETED is queued, and the heap returns to where
// it started.
func TestTrackerForgetsDeletedVolumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := newTracker(t, &r, 500*time.Millisecond)
		heap := func() uint64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapAlloc
		}
		const volumes, rounds = 10_000, 9
		// What the recorder keeps (its list, the ids it holds) is not the
		// tracker's: allocated before the baseline. Every round has its own
		// volumes, so anything kept per volume would grow round by round.
		r.mu.Lock()
		r.got, r.at = make([]Observation, 0, 4*rounds*volumes), make([]time.Time, 0, 4*rounds*volumes)
		r.deleted = make(map[string]bool, rounds*volumes)
		r.mu.Unlock()
		ids := make([][]string, rounds)
		for round := range ids {
			ids[round] = make([]string, volumes)
			for i := range ids[round] {
				ids[round][i] = fmt.Sprintf("round-%d-vol-%d", round, i)
			}
		}
		lifecycles := func(round int) {
			for _, st := range []Status{Provisioning, Running, Deleting, Deleted} {
				for _, id := range ids[round] {
					observe(tr, id, st)
				}
				advance(time.Second) // every window closes
			}
		}
		// The first rounds grow the runtime's own tables (timers, records
		// of the goroutines window timers start) to their plateau; the
		// baseline is taken after them.
		const warmUp = 2
		for round := range warmUp {
			lifecycles(round)
		}
		before := heap()
		for round := warmUp; round < rounds; round++ {
			lifecycles(round)
		}
		after := heap()
		if kept := held(tr); kept != 0 {
			t.Fatalf("after %d deleted volumes the tracker still holds %d", rounds*volumes, kept)
		}
		r.want(t, "round-8-vol-9999", Provisioning, Running, Deleting, Deleted)
		// 70,000 volumes kept would hold their statuses and map entries:
		// about 10 MB (1.5 MB per 10,000 measured). Without a leak the heap
		// ends within about 3 MB of the baseline (the runtime's records of
		// the goroutines window timers start, which vary from run to run).
		t.Logf("heap %d bytes before, %d after %d more lifecycles", before, after, (rounds-warmUp)*volumes)
		if after > before+6<<20 {
			t.Fatalf("heap grew from %d to %d bytes over %d finished lifecycles", before, after, (rounds-warmUp)*volumes)
		}
	})
}

// A first status a create recorded itself is not written again when the
// follower sees it; what follows is, and counts against the same flap
// budget (the create's status spent a token, so PROVISIONING, RUNNING,
// PROVISIONING in a burst leaves the last waiting for a token).
func TestTrackerSkipsWhatACreateRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := newTracker(t, &r, window)
		first := Observation{EnvironmentID: "env", VolumeID: "created", Status: Provisioning, Message: string(Provisioning)}
		tr.Creating("env", "created")(&first)
		observe(tr, "created", Provisioning)
		advance(time.Millisecond)
		r.want(t, "created")
		observe(tr, "created", Running)
		observe(tr, "created", Provisioning)
		advance(time.Millisecond)
		r.want(t, "created", Running)
		advance(window)
		r.want(t, "created", Running, Provisioning)

		// A volume the tracker already wrote for keeps its own view.
		observe(tr, "seen", Provisioning)
		advance(time.Millisecond)
		tr.Creating("env", "seen")(&Observation{EnvironmentID: "env", VolumeID: "seen", Status: Running, Message: string(Running)})
		observe(tr, "seen", Running)
		advance(time.Millisecond)
		r.want(t, "seen", Provisioning, Running)
	})
}

// What the follower sees of a volume while its create is under way is held
// and judged once the create is done: the same status as the create
// recorded writes nothing, a newer one is written, and when the create
// recorded nothing the follower's latest sight is written as usual.
func TestTrackerHoldsWhatItSeesWhileACreateRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := newTracker(t, &r, window)
		created := func(id string, st Status) *Observation {
			return &Observation{EnvironmentID: "env", VolumeID: id, Status: st, Message: string(st)}
		}

		done := tr.Creating("env", "same")
		observe(tr, "same", Provisioning)
		advance(time.Millisecond)
		done(created("same", Provisioning))
		advance(time.Millisecond)
		r.want(t, "same")

		done = tr.Creating("env", "bound")
		observe(tr, "bound", Provisioning)
		observe(tr, "bound", Running)
		advance(time.Millisecond)
		r.want(t, "bound")
		done(created("bound", Provisioning))
		advance(time.Millisecond)
		r.want(t, "bound", Running)

		done = tr.Creating("env", "unrecorded")
		observe(tr, "unrecorded", Provisioning)
		done(nil)
		done(created("unrecorded", Running)) // a second call changes nothing
		advance(time.Millisecond)
		r.want(t, "unrecorded", Provisioning)

		// A create that saw nothing and recorded nothing leaves nothing.
		tr.Creating("env", "refused")(nil)
		tr.mu.Lock()
		_, kept := tr.volumes[volumeKey{"env", "refused"}]
		tr.mu.Unlock()
		if kept {
			t.Fatal("the tracker remembers a volume it never saw and nothing recorded")
		}
	})
}

// Closing while a create is under way records what the follower saw of its
// volume.
func TestTrackerCloseRecordsWhatACreateHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r memRecorder
		tr := NewTracker(TrackerOptions{Record: r.record, Window: window, Logger: slog.New(slog.DiscardHandler)})
		go tr.Run()
		tr.Creating("env", "v")
		observe(tr, "v", Running)
		tr.Close(context.Background())
		r.want(t, "v", Running)
	})
}
