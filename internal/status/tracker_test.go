package status_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/status"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// volumeRecord creates an environment and a volume record for the tracker
// to report on.
func volumeRecord(t *testing.T, reg *registrytest.Registry, volumeID string) {
	t.Helper()
	reg.InsertEnvironment(t, "env")
	reg.InsertVolume(t, "env", volumeID)
}

// reported lists the statuses queued in the outbox for a volume, in order.
func reported(t *testing.T, reg *registrytest.Registry, volumeID string) []string {
	t.Helper()
	rows, err := reg.Pool.Query(context.Background(), `SELECT status FROM outbox WHERE volume_id = $1 ORDER BY id`, volumeID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func observe(tr *status.Tracker, volumeID string, st status.Status) {
	tr.Observe(status.Observation{EnvironmentID: "env", VolumeID: volumeID, Status: st, Message: string(st)})
}

// A flapping claim (10 flips in 200 ms) that ends where it started reaches
// DCM once: the first change at once, and nothing when the window closes.
func TestTrackerCalmsFlapping(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	volumeRecord(t, reg, "flappy")
	tr := status.NewTracker(status.Recorder{DB: reg.Pool}, 500*time.Millisecond, slog.New(slog.DiscardHandler))
	defer tr.Close()

	observe(tr, "flappy", status.Provisioning)
	for i := range 10 {
		if i%2 == 0 {
			observe(tr, "flappy", status.Running)
		} else {
			observe(tr, "flappy", status.Provisioning)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	got := reported(t, reg, "flappy")
	if !slices.Equal(got, []string{"PROVISIONING"}) {
		t.Fatalf("flapping reported %v; want [PROVISIONING] once", got)
	}
}

// A burst that ends on another status than it started from reaches DCM
// twice: the first change at once, the final status when the window closes.
func TestTrackerPublishesTheLastStatusOfABurst(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	volumeRecord(t, reg, "burst")
	tr := status.NewTracker(status.Recorder{DB: reg.Pool}, 300*time.Millisecond, slog.New(slog.DiscardHandler))
	defer tr.Close()
	for _, st := range []status.Status{status.Provisioning, status.Running, status.Failed, status.Provisioning, status.Running} {
		observe(tr, "burst", st)
	}
	time.Sleep(time.Second)
	if got := reported(t, reg, "burst"); !slices.Equal(got, []string{"PROVISIONING", "RUNNING"}) {
		t.Fatalf("burst reported %v, want [PROVISIONING RUNNING]", got)
	}
}

// Nothing follows DELETED: a stale observation of a deleted volume (a sweep
// that raced the deletion) is not reported.
func TestTrackerNeverRevivesADeletedVolume(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	volumeRecord(t, reg, "gone")
	tr := status.NewTracker(status.Recorder{DB: reg.Pool}, 50*time.Millisecond, slog.New(slog.DiscardHandler))
	observe(tr, "gone", status.Running)
	time.Sleep(100 * time.Millisecond)
	observe(tr, "gone", status.Deleted)
	time.Sleep(100 * time.Millisecond)
	observe(tr, "gone", status.Running)
	tr.Close()
	if got := reported(t, reg, "gone"); !slices.Equal(got, []string{"RUNNING", "DELETED"}) {
		t.Fatalf("reported %v, want [RUNNING DELETED]", got)
	}
}

// A new status after a quiet period is recorded at once, not after the
// window; an unchanged status is never recorded again.
func TestTrackerReportsRealTransitionsAtOnce(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	volumeRecord(t, reg, "steady")
	tr := status.NewTracker(status.Recorder{DB: reg.Pool}, 500*time.Millisecond, slog.New(slog.DiscardHandler))
	defer tr.Close()

	observe(tr, "steady", status.Provisioning)
	time.Sleep(700 * time.Millisecond) // the window closes
	start := time.Now()
	observe(tr, "steady", status.Running)
	deadline := start.Add(2 * time.Second)
	for len(reported(t, reg, "steady")) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("RUNNING not recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Fatalf("a real transition waited %s; it must not wait for the window", took)
	}
	observe(tr, "steady", status.Running)
	time.Sleep(700 * time.Millisecond)
	if got := reported(t, reg, "steady"); len(got) != 2 {
		t.Fatalf("reported %v; an unchanged status must not be reported again", got)
	}
}

// Close flushes what a window still holds.
func TestTrackerCloseFlushesPendingTransitions(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	volumeRecord(t, reg, "closing")
	tr := status.NewTracker(status.Recorder{DB: reg.Pool}, time.Hour, slog.New(slog.DiscardHandler))
	observe(tr, "closing", status.Provisioning)
	observe(tr, "closing", status.Running) // held by the hour-long window
	tr.Close()
	if got := reported(t, reg, "closing"); len(got) != 2 || got[1] != "RUNNING" {
		t.Fatalf("after Close: %v", got)
	}
}

// Repeats of the current status (resyncs, sweeps every 50 ms) never keep a
// window open: a real change is still recorded at once.
func TestTrackerRepeatsDoNotHoldBackTransitions(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	volumeRecord(t, reg, "swept")
	tr := status.NewTracker(status.Recorder{DB: reg.Pool}, 500*time.Millisecond, slog.New(slog.DiscardHandler))
	defer tr.Close()
	var current atomic.Value
	current.Store(status.Running)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				observe(tr, "swept", current.Load().(status.Status))
			}
		}
	}()
	time.Sleep(1200 * time.Millisecond)
	for range 3 {
		next := status.Provisioning
		if current.Load() == status.Provisioning {
			next = status.Running
		}
		before := len(reported(t, reg, "swept"))
		start := time.Now()
		current.Store(next)
		observe(tr, "swept", next)
		for len(reported(t, reg, "swept")) == before {
			if time.Since(start) > 2*time.Second {
				t.Fatalf("%s not recorded", next)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Fatalf("the change to %s waited %s behind repeats", next, took)
		}
		time.Sleep(700 * time.Millisecond)
	}
}

// A database that refuses every write while the queue is full must not
// wedge the tracker: failed writes are forgotten without waiting for the
// observer that is waiting for the writer.
func TestTrackerSurvivesAFullQueueOfFailingWrites(t *testing.T) {
	db, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tr := status.NewTracker(status.Recorder{DB: db}, time.Hour, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 5000 { // more than the queue holds
			tr.Observe(status.Observation{EnvironmentID: "env", VolumeID: fmt.Sprint("vol-", i), Status: status.Provisioning})
		}
		tr.Close()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the tracker is stuck: Observe and the writer wait for each other")
	}
}
