package status

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Tracker turns a stream of observations into recorded transitions, fast
// but calm: a volume's new status is recorded at once (leading edge); further
// changes of that volume inside the debounce window are coalesced and only
// the last is recorded when the window closes. Flapping never floods DCM,
// and a change after a quiet window is recorded at once.
type Tracker struct {
	recorder Recorder
	window   time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	windows map[volumeKey]*debounceWindow
	// last is what was last queued per volume: repeats (resyncs, sweeps)
	// never reach the database.
	last   map[volumeKey]Observation
	closed bool
	queue  chan Observation
	done   chan struct{}
}

type volumeKey struct{ env, volume string }

// debounceWindow is one volume's open debounce window.
type debounceWindow struct {
	timer   *time.Timer
	pending *Observation
}

// queueSize bounds observations waiting for the database; beyond it
// Observe blocks — every environment's handlers and the sweeps wait behind
// the one writer — which delays statuses rather than dropping one.
const queueSize = 4096

// NewTracker starts a tracker; Close stops it.
func NewTracker(recorder Recorder, window time.Duration, logger *slog.Logger) *Tracker {
	t := &Tracker{
		recorder: recorder, window: window, log: logger,
		windows: map[volumeKey]*debounceWindow{}, last: map[volumeKey]Observation{}, queue: make(chan Observation, queueSize), done: make(chan struct{}),
	}
	go t.write()
	return t
}

// Observe takes a volume's current status.
func (t *Tracker) Observe(o Observation) {
	k := volumeKey{o.EnvironmentID, o.VolumeID}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if w, open := t.windows[k]; open {
		// Only a change from what was last queued keeps the window busy;
		// a repeat (resync, sweep) or a flap back cancels what was pending.
		w.pending = nil
		if t.last[k] != o {
			w.pending = &o
		}
		return
	}
	prev := t.last[k]
	if prev == o {
		return
	}
	t.enqueue(k, o)
	// Only a change DCM hears opens a window; a message-only change must
	// not hold back the next real transition.
	if reportable(prev, o) {
		t.windows[k] = &debounceWindow{timer: time.AfterFunc(t.window, func() { t.closeWindow(k) })}
	}
}

// closeWindow records the last observation the window coalesced, if any,
// and opens a new window for it; an empty window simply ends.
func (t *Tracker) closeWindow(k volumeKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.windows[k]
	if w == nil || t.closed {
		return
	}
	if w.pending == nil {
		delete(t.windows, k)
		return
	}
	t.enqueue(k, *w.pending)
	w.pending = nil
	w.timer.Reset(t.window)
}

// enqueue hands o to the writer; the caller holds t.mu. A DELETED volume
// stays in last as a tombstone, so a stale observation is recognised.
func (t *Tracker) enqueue(k volumeKey, o Observation) {
	t.queue <- o
	t.last[k] = o
}

// write records queued observations in order.
func (t *Tracker) write() {
	defer close(t.done)
	for o := range t.queue {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := t.recorder.Record(ctx, o); err != nil {
			t.log.ErrorContext(ctx, "record volume status (the next sweep retries)", "environment", o.EnvironmentID, "volume", o.VolumeID, "status", o.Status, "error", err)
			// Not inline: an Observe holding t.mu may be waiting for room
			// in the queue, which only this goroutine makes.
			go t.forgetFailed(o)
		}
		cancel()
	}
}

// forgetFailed drops o from last if it is still the latest queued for its
// volume, so the next observation of the same status is written again.
func (t *Tracker) forgetFailed(o Observation) {
	k := volumeKey{o.EnvironmentID, o.VolumeID}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last[k] == o {
		delete(t.last, k)
	}
}

// Close flushes every open window's pending observation, records all that
// is queued and stops. Observations after Close are dropped: the next start
// sees the same cluster state and records it.
func (t *Tracker) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		<-t.done
		return
	}
	t.closed = true
	for k, w := range t.windows {
		w.timer.Stop()
		if w.pending != nil && t.last[k] != *w.pending {
			t.enqueue(k, *w.pending)
		}
		delete(t.windows, k)
	}
	close(t.queue)
	t.mu.Unlock()
	<-t.done
}
