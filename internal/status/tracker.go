package status

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// recordTimeout bounds writing one observation.
const recordTimeout = 30 * time.Second

// Tracker turns a stream of observations into recorded transitions, fast
// but calm: a volume's new status is recorded at once (leading edge); further
// changes of that volume inside the debounce window are coalesced and only
// the last is recorded when the window closes. Flapping never floods DCM,
// and a change after a quiet window is recorded at once. A volume is
// forgotten once its DELETED window is over (the database refuses anything
// after DELETED), so memory follows the live volumes, not every volume
// ever seen.
type Tracker struct {
	record func(context.Context, Observation) error
	window time.Duration
	log    *slog.Logger
	// writing is the writer's context: Close cancels it when its deadline
	// passes, and what is still queued is left for the next start.
	writing       context.Context
	cancelWriting context.CancelFunc

	mu      sync.Mutex
	windows map[volumeKey]*debounceWindow
	// last is what was last queued per volume: repeats (resyncs, sweeps)
	// never reach the database.
	last   map[volumeKey]Observation
	closed bool
	queue  chan Observation
	done   chan struct{}

	// failed holds writes that failed, to be written again when seen
	// again, until the next holder of mu applies it (always before the
	// next observation is judged). The writer never waits for mu: an
	// Observe holding it may be waiting for room in the queue.
	settledMu sync.Mutex
	failed    []Observation
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

// NewTracker starts a tracker writing through record (Recorder.Record);
// Close stops it.
func NewTracker(record func(context.Context, Observation) error, window time.Duration, logger *slog.Logger) *Tracker {
	t := &Tracker{
		record: record, window: window, log: logger,
		windows: map[volumeKey]*debounceWindow{}, last: map[volumeKey]Observation{}, queue: make(chan Observation, queueSize), done: make(chan struct{}),
	}
	t.writing, t.cancelWriting = context.WithCancel(context.Background())
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
	t.applySettled()
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
		if t.last[k].Status == Deleted {
			delete(t.last, k) // nothing follows DELETED (the database refuses it)
		}
		t.shrink()
		return
	}
	t.enqueue(k, *w.pending)
	w.pending = nil
	w.timer.Reset(t.window)
}

// shrink replaces emptied maps: a Go map keeps the room of its largest size,
// so after a burst of volumes ends the memory would not come back. The
// caller holds t.mu.
func (t *Tracker) shrink() {
	if len(t.windows) == 0 {
		t.windows = map[volumeKey]*debounceWindow{}
	}
	if len(t.last) == 0 {
		t.last = map[volumeKey]Observation{}
	}
}

// enqueue hands o to the writer; the caller holds t.mu. Once Close's
// deadline has passed o is dropped (the next start observes it again)
// rather than waiting for room.
func (t *Tracker) enqueue(k volumeKey, o Observation) {
	select {
	case t.queue <- o:
		t.last[k] = o
	case <-t.writing.Done():
	}
}

// applySettled forgets the writes that failed, unless the volume moved on
// since, so the next observation of the same status is written again; the
// caller holds t.mu.
func (t *Tracker) applySettled() {
	t.settledMu.Lock()
	failed := t.failed
	t.failed = nil
	t.settledMu.Unlock()
	for _, o := range failed {
		if k := (volumeKey{o.EnvironmentID, o.VolumeID}); t.last[k] == o {
			delete(t.last, k)
		}
	}
}

// writeFailed tells the tracker a write of o failed.
func (t *Tracker) writeFailed(o Observation) {
	t.settledMu.Lock()
	t.failed = append(t.failed, o)
	t.settledMu.Unlock()
	if t.mu.TryLock() { // otherwise the holder, or the next, applies it
		t.applySettled()
		t.mu.Unlock()
	}
}

// write records queued observations in order.
func (t *Tracker) write() {
	defer close(t.done)
	dropped := 0
	for o := range t.queue {
		if t.writing.Err() != nil {
			dropped++ // Close's deadline passed: the next start records it
			continue
		}
		ctx, cancel := context.WithTimeout(t.writing, recordTimeout)
		err := t.record(ctx, o)
		cancel()
		switch {
		case err != nil && t.writing.Err() != nil:
			dropped++
		case err != nil:
			t.log.Error("record volume status (the next sweep retries)", "environment", o.EnvironmentID, "volume", o.VolumeID, "status", o.Status, "error", err)
			t.writeFailed(o)
		}
	}
	if dropped > 0 {
		t.log.Warn("volume statuses not recorded before the shutdown deadline; the next start observes and records them", "count", dropped)
	}
}

// Close flushes every open window's pending observation, records all that
// is queued and stops; when ctx ends first, the writer stops at once and
// what is left is recorded by the next start, which sees the same cluster
// state. Observations after Close are dropped for the same reason.
func (t *Tracker) Close(ctx context.Context) {
	// At the deadline the writer stops writing and drops what is queued,
	// which also frees an Observe (or this Close) waiting for room.
	stop := context.AfterFunc(ctx, t.cancelWriting)
	defer stop()
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		for k, w := range t.windows {
			w.timer.Stop()
			if w.pending != nil && t.last[k] != *w.pending {
				t.enqueue(k, *w.pending)
			}
			delete(t.windows, k)
		}
		close(t.queue)
	}
	t.mu.Unlock()
	<-t.done
	t.cancelWriting()
}
