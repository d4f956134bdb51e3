package status

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcm-project/storage-gateway/internal/membership"
)

// recordTimeout bounds writing one observation.
const recordTimeout = 30 * time.Second

// Tracker turns a stream of observations into recorded transitions: a
// volume's lifecycle (PROVISIONING → RUNNING or FAILED → DELETING →
// DELETED) is recorded the moment it is observed, and only flapping is
// coalesced. Each volume holds two tokens, refilled one per window; a
// status change (or a new provisioning warning) spends one, except changes
// to DELETING and DELETED, which are always recorded at once (nothing but
// DELETED can follow them). A change that finds no token starts
// coalescing: until a token is back, further changes only replace what is
// pending, and the last of them is recorded then. So a new volume's first
// two steps (PROVISIONING, then RUNNING or FAILED), an expansion's
// PROVISIONING and RUNNING, and a deletion never wait; a flapping claim
// reaches DCM at most three times per burst (two changes, then its final
// status), and one that keeps flapping about once per window. A volume is
// forgotten once its DELETED is queued, or when the database says it is
// gone, so memory follows the live volumes.
type Tracker struct {
	record func(context.Context, Observation) error
	window time.Duration
	log    *slog.Logger
	// writing is the writer's context: Close cancels it when its deadline
	// passes, and what is still queued is left for the next start.
	writing       context.Context
	cancelWriting context.CancelFunc

	mu      sync.Mutex
	volumes map[volumeKey]*volume
	closed  bool
	queue   chan Observation
	// started is set once the writer started (Run, or Close when Run
	// never did): never under mu, which an Observe waiting for room in
	// the queue holds. The writer closes done when it returns.
	started atomic.Bool
	done    chan struct{}

	// settled holds what the writer learned — writes that failed (written
	// again when seen again) and volumes the database says are gone (to
	// forget) — until the next holder of mu applies it, always before the
	// next observation is judged. The writer never waits for mu: an
	// Observe holding it may be waiting for room in the queue.
	settledMu sync.Mutex
	settled   []settledWrite
}

// settledWrite is what the writer learned of one observation.
type settledWrite struct {
	o    Observation
	gone bool // else the write failed
}

type volumeKey struct{ env, volume string }

// volume is what the tracker knows of one volume.
type volume struct {
	// last is what was last queued: repeats (resyncs, sweeps) never reach
	// the database, unless its write failed (retry).
	last  Observation
	retry bool
	// tokens are the flap tokens left as of refilled.
	tokens   float64
	refilled time.Time
	// coalescing is set while changes wait for a token; pending is the
	// latest of them (nil when the volume is back where it was).
	coalescing *time.Timer
	pending    *Observation
	// creating counts the creates recording the volume's first status
	// themselves; while there is one, what the follower observes is held
	// (the latest in held) and judged once they are done.
	creating int
	held     *Observation
}

// flapTokens is how many status changes a volume may make at once: a
// lifecycle step or an expansion takes two (PROVISIONING, RUNNING). One more
// comes back per window.
const flapTokens = 2

// refill tops v's tokens up for the time passed since the last refill.
func (v *volume) refill(now time.Time, window time.Duration) {
	if window > 0 {
		v.tokens = min(flapTokens, v.tokens+float64(now.Sub(v.refilled))/float64(window))
	} else {
		v.tokens = flapTokens
	}
	v.refilled = now
}

// costsToken reports whether recording o after last spends a flap token:
// every change DCM hears does, except to DELETING and DELETED, after which
// only DELETED can follow.
func costsToken(last, o Observation) bool {
	if o.Status == Deleting || o.Status == Deleted {
		return false
	}
	return reportable(last, o)
}

// queueSize bounds observations waiting for the database; beyond it
// Observe blocks — every environment's handlers and the sweeps wait behind
// the one writer — which delays statuses rather than dropping one.
const queueSize = 4096

// TrackerOptions configure a Tracker.
type TrackerOptions struct {
	// Record writes one observation (Recorder.RecordObserved, which says
	// ErrGone for a volume that is gone); required.
	Record func(context.Context, Observation) error
	// Window is how long a spent flap token takes to come back (0: at
	// once).
	Window time.Duration
	Logger *slog.Logger
}

// NewTracker returns a tracker; Run writes, Close flushes and stops it.
func NewTracker(opts TrackerOptions) *Tracker {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	t := &Tracker{
		record: opts.Record, window: opts.Window, log: opts.Logger,
		volumes: map[volumeKey]*volume{}, queue: make(chan Observation, queueSize), done: make(chan struct{}),
	}
	t.writing, t.cancelWriting = context.WithCancel(context.Background())
	return t
}

// Run records queued observations in order until Close has flushed them
// (or its deadline passed), then returns. Its owner runs it once, on its
// own goroutine; until it runs, observations wait in the queue. It is not
// stopped by a context: the shutdown stops it after the workers, while
// this replica's leases still hold (Close).
func (t *Tracker) Run() {
	if t.started.CompareAndSwap(false, true) {
		t.write()
	}
}

// Observe takes a volume's current status.
func (t *Tracker) Observe(o Observation) {
	t.locked(volumeKey{o.EnvironmentID, o.VolumeID}, func(k volumeKey, v *volume) { t.observe(k, v, o) })
}

// locked runs do with the tracker's lock held and what the writer learned
// applied, v being the volume's entry (nil when the tracker knows nothing of
// it); once the tracker is closed, it does nothing.
func (t *Tracker) locked(k volumeKey, do func(k volumeKey, v *volume)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.applySettled()
	do(k, t.volumes[k])
}

// observe is Observe with the lock held.
func (t *Tracker) observe(k volumeKey, v *volume, o Observation) {
	if v == nil {
		v = &volume{tokens: flapTokens, refilled: time.Now()}
		t.volumes[k] = v
	}
	if v.creating > 0 {
		v.held = &o
		return
	}
	if v.coalescing != nil {
		if costsToken(v.last, o) || v.last == o {
			// A repeat, or a flap back to what was last queued, leaves
			// nothing pending.
			v.pending = nil
			if v.last != o {
				v.pending = &o
			}
			return
		}
		// A deletion ends the coalescing: nothing it held matters now.
		v.coalescing.Stop()
		v.coalescing, v.pending = nil, nil
	}
	if v.last == o {
		if !v.retry {
			return
		}
		v.retry = false // its write failed: write it again, without a token
		t.enqueue(k, v, o)
		return
	}
	if costsToken(v.last, o) {
		now := time.Now()
		v.refill(now, t.window)
		if v.tokens < 1 {
			v.pending = &o
			wait := time.Duration((1 - v.tokens) * float64(t.window))
			v.coalescing = time.AfterFunc(wait, func() { t.release(k) })
			return
		}
		v.tokens--
	}
	t.enqueue(k, v, o)
}

// Creating tells the tracker that a create is about to record a volume's
// first status itself, in the statement that records its claim. Until
// done is called, the follower's observations of the volume are held, not
// written: the watch often delivers a new claim before the create has
// recorded it, and writing that first sight would cost a second
// transaction for the status the create records anyway. done says what the
// create recorded (nil: nothing); the status counts against the volume's
// flap tokens like a recording of the tracker's own, unless the tracker had
// queued something for the volume already, and what was held is then
// judged against it.
func (t *Tracker) Creating(environmentID, volumeID string) (done func(recorded *Observation)) {
	key := volumeKey{environmentID, volumeID}
	t.locked(key, func(k volumeKey, v *volume) {
		if v == nil {
			v = &volume{tokens: flapTokens, refilled: time.Now()}
			t.volumes[k] = v
		}
		v.creating++
	})
	var once sync.Once
	return func(recorded *Observation) {
		once.Do(func() { t.locked(key, func(k volumeKey, v *volume) { t.created(k, v, recorded) }) })
	}
}

// created is Creating's done with the lock held.
func (t *Tracker) created(k volumeKey, v *volume, recorded *Observation) {
	if v == nil || v.creating == 0 {
		return
	}
	v.creating--
	if recorded != nil && v.last == (Observation{}) {
		v.last = *recorded
		if costsToken(Observation{}, *recorded) {
			v.tokens--
		}
	}
	if v.creating > 0 {
		return
	}
	if held := v.held; held != nil {
		v.held = nil
		t.observe(k, v, *held)
		return
	}
	if v.last == (Observation{}) && v.coalescing == nil {
		t.forget(k) // nothing recorded, nothing seen: nothing to remember
	}
}

// release ends a volume's coalescing: a token is back, and the pending
// change, if any, is queued with it.
func (t *Tracker) release(k volumeKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.volumes[k]
	if v == nil || v.coalescing == nil || t.closed {
		return
	}
	v.coalescing = nil
	pending := v.pending
	v.pending = nil
	if pending != nil && *pending != v.last {
		if costsToken(v.last, *pending) {
			v.refill(time.Now(), t.window)
			v.tokens--
		}
		t.enqueue(k, v, *pending)
	}
}

// enqueue hands o to the writer; the caller holds t.mu. A volume whose
// DELETED is queued is forgotten. Once Close's deadline has passed o is
// dropped (the next start observes it again) rather than waiting for room.
func (t *Tracker) enqueue(k volumeKey, v *volume, o Observation) {
	select {
	case t.queue <- o:
		v.last, v.retry = o, false
	case <-t.writing.Done():
		return
	}
	if o.Status == Deleted && v.coalescing == nil {
		t.forget(k)
	}
}

// forget drops a volume; the caller holds t.mu.
func (t *Tracker) forget(k volumeKey) {
	delete(t.volumes, k)
	if len(t.volumes) == 0 {
		// A Go map keeps the room of its largest size: after a burst of
		// volumes ends, the memory comes back.
		t.volumes = map[volumeKey]*volume{}
	}
}

// applySettled applies what the writer learned, unless the volume moved on
// since: a failed write is written again when its status is seen again; a
// volume the database says is gone is forgotten. The caller holds t.mu.
func (t *Tracker) applySettled() {
	t.settledMu.Lock()
	settled := t.settled
	t.settled = nil
	t.settledMu.Unlock()
	for _, s := range settled {
		k := volumeKey{s.o.EnvironmentID, s.o.VolumeID}
		v := t.volumes[k]
		switch {
		case v == nil || v.last != s.o:
		case s.gone && v.coalescing == nil:
			t.forget(k)
		case !s.gone:
			v.retry = true
		}
	}
}

// settle tells the tracker what the writer learned of o.
func (t *Tracker) settle(o Observation, gone bool) {
	t.settledMu.Lock()
	t.settled = append(t.settled, settledWrite{o: o, gone: gone})
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
		case errors.Is(err, ErrGone):
			t.settle(o, true)
		case errors.Is(err, membership.ErrNotOwner):
			// Handed over: the new owner observes the claim and records
			// what this replica could not.
			t.log.Debug("volume status not recorded: another replica owns the environment now", "environment", o.EnvironmentID, "volume", o.VolumeID)
			t.settle(o, true)
		case err != nil && t.writing.Err() != nil:
			dropped++
		case err != nil:
			t.log.Error("record volume status (the next sweep retries)", "environment", o.EnvironmentID, "volume", o.VolumeID, "status", o.Status, "error", err)
			t.settle(o, false)
		}
	}
	if dropped > 0 {
		t.log.Warn("volume statuses not recorded before the shutdown deadline; the next start observes and records them", "count", dropped)
	}
}

// Close queues what every coalescing volume holds pending (and what the
// follower saw of volumes whose create is under way), records all that is
// queued and stops; when ctx ends first, the writer stops at once
// and what is left is recorded by the next start, which sees the same
// cluster state. Observations after Close are dropped for the same reason.
func (t *Tracker) Close(ctx context.Context) {
	// At the deadline the writer stops writing and drops what is queued,
	// which also frees an Observe (or this Close) waiting for room.
	stop := context.AfterFunc(ctx, t.cancelWriting)
	defer stop()
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		for k, v := range t.volumes {
			// What a create under way holds is newer than anything
			// pending from before it.
			latest := v.held
			if v.coalescing != nil {
				v.coalescing.Stop()
				v.coalescing = nil
				latest = cmp.Or(latest, v.pending)
			}
			if latest != nil && *latest != v.last {
				t.enqueue(k, v, *latest)
			}
		}
		close(t.queue)
	}
	t.mu.Unlock()
	if t.started.CompareAndSwap(false, true) {
		t.write() // Run never started: the flush is Close's own
	} else {
		<-t.done
	}
	t.cancelWriting()
}
