package clusters

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// Health is a cluster's state as the pool sees it.
type Health struct {
	// State is READY, DEGRADED, UNREACHABLE, or PENDING before the first
	// sync or check.
	State HealthState
	// Message is written by the gateway, never copied from an API server.
	Message string
	// Synced is true once every cache has synced (reads can be served); it
	// stays true while the cluster is unreachable and the caches are stale.
	Synced bool
}

const (
	msgAwaitingServer = "waiting for the API server to answer a health check"
	msgReady          = "connected; caches synced"
)

// checkResult is one health check; a failed one carries classify's words.
type checkResult struct {
	ok      bool
	message string
}

// syncPhase is how far a cluster's initial cache sync got.
type syncPhase int

const (
	phaseAwaitingServer syncPhase = iota // no health check has succeeded yet
	phaseQueued                          // waiting for a sync slot
	phaseSyncing                         // informers started, before the deadline
	phaseSynced                          // every cache synced at least once
	phaseLate                            // the deadline passed with caches unsynced
)

// tracker turns health checks and sync progress into a state. Informers
// start only after a check succeeded, so a dead cluster holds no sync slot
// and sends no LISTs, only its health checks.
type tracker struct {
	threshold int
	// syncSlots is how many environments may sync at once (for messages).
	syncSlots   int
	syncTimeout time.Duration
	caches      int

	failures int
	// down is set after threshold consecutive failures, cleared by a
	// success; downMessage explains the latest failure.
	down        bool
	downMessage string
	phase       syncPhase
	unsynced    []string
}

// checked counts a health check. Failures make the cluster UNREACHABLE
// whatever classify called them: an API server that is starting answers 401
// for a moment, and a state flapping between UNREACHABLE and UNAUTHORIZED
// would tell an admin nothing more than the message does.
func (t *tracker) checked(r checkResult) {
	if r.ok {
		t.failures, t.down = 0, false
		if t.phase == phaseAwaitingServer {
			t.phase = phaseQueued
		}
		return
	}
	t.failures++
	if t.failures >= t.threshold {
		t.down, t.downMessage = true, r.message
	}
}

func (t *tracker) started() { t.phase = phaseSyncing }

func (t *tracker) cachesUnsynced(names []string) {
	t.unsynced = names
	if len(names) == 0 {
		t.phase = phaseSynced
	}
}

func (t *tracker) deadlinePassed() {
	if t.phase == phaseSyncing {
		t.phase = phaseLate
	}
}

// settled reports whether the initial sync is over, one way or another.
func (t *tracker) settled() bool {
	return t.phase == phaseSynced || t.phase == phaseLate || t.down
}

func (t *tracker) health() (HealthState, string) {
	switch {
	case t.down:
		return HealthUnreachable, t.downMessage
	case t.phase == phaseSynced:
		return HealthReady, msgReady
	case t.phase == phaseLate && len(t.unsynced) < t.caches:
		return HealthDegraded, fmt.Sprintf("caches not synced within %s, still retrying: %s", t.syncTimeout, strings.Join(t.unsynced, ", "))
	case t.phase == phaseLate:
		return HealthUnreachable, fmt.Sprintf("no cache synced within %s; still retrying", t.syncTimeout)
	case t.phase == phaseSyncing:
		return HealthPending, "syncing caches"
	case t.phase == phaseQueued:
		return HealthPending, fmt.Sprintf("waiting to sync; at most %d environments sync at once", t.syncSlots)
	}
	return HealthPending, msgAwaitingServer
}

// healthWorkers is how many goroutines run the pool's steady checks (the
// last one succeeded and a connection is open): an answer takes
// milliseconds, so a few would do, but a cluster that dies holds its worker
// for a whole HealthTimeout at its first failed check. 128 workers take 25
// such deaths a second (1,280 clusters going away at once, spread over the
// steady interval) before any check waits; the checks after a failure run
// on goroutines of their own (see runCheck).
const healthWorkers = 128

// healthChecks holds every cluster's next check in one delaying queue and
// runs the due ones on long-lived workers. Steady checks are due on whole
// ticks (rounded down), so the checks of a tick run together; each pool's
// ticks start at a random offset, so replicas do not send theirs at the
// same instant, and a check after a failure keeps its exact interval: it is
// the one that finds out whether a cluster is back. A timer and a fresh
// goroutine per check woke the process once per check and grew each
// goroutine's stack anew: idle replicas with 1,641–1,685 environments each
// spent 4.3–4.6 % of a core before, 2.3–2.4 % after (BenchmarkIdleFleet,
// 5,000 environments on three replicas).
type healthChecks struct {
	tick, offset time.Duration
	queue        workqueue.TypedDelayingInterface[scheduledCheck]
	// workers is how many run, healthWorkers but in tests.
	workers int
	start   sync.Once
	running sync.WaitGroup
}

// scheduledCheck is one queued check: the cluster and the number of the
// check (see Cluster.scheduleCheck). steady says that the cluster's last
// check succeeded.
type scheduledCheck struct {
	c      *Cluster
	n      uint64
	steady bool
}

// newHealthChecks returns the queue; its workers start with the first check.
// The tick is a second, or a tenth of the failure interval when that is
// shorter (tests), so rounding never moves a check by more than a tenth of
// its interval, and always earlier: the detection bounds stand.
func newHealthChecks(interval time.Duration) *healthChecks {
	tick := min(time.Second, interval/10)
	offset := rand.N(tick + 1) //nolint:gosec // spreading timers, not a secret
	return &healthChecks{tick: tick, offset: offset, workers: healthWorkers, queue: workqueue.NewTypedDelayingQueue[scheduledCheck]()}
}

// after queues s to run once d has passed, rounded down to a tick when s
// is steady.
func (h *healthChecks) after(s scheduledCheck, d time.Duration) {
	h.start.Do(func() {
		for range h.workers {
			h.running.Go(h.work)
		}
	})
	if s.steady {
		d = onTick(time.Now(), d, h.tick, h.offset)
	}
	h.queue.AddAfter(s, d)
}

// onTick is d shortened so that it ends on a tick (the ticks are offset
// from whole multiples of tick), when d is longer than a tick.
func onTick(now time.Time, d, tick, offset time.Duration) time.Duration {
	if d <= tick {
		return d
	}
	return now.Add(d - offset).Truncate(tick).Add(offset).Sub(now)
}

func (h *healthChecks) work() {
	for {
		s, shutdown := h.queue.Get()
		if shutdown {
			return
		}
		s.c.runCheck(s)
		h.queue.Done(s)
	}
}

// stop ends the workers once the checks they run have ended; the pool's
// clusters are stopped first, which ends their checks.
func (h *healthChecks) stop() {
	h.queue.ShutDown()
	h.running.Wait()
}

// scheduleCheck has the API server checked once d has passed and the result
// sent to the run goroutine, which calls it; steady says that the last check
// succeeded. checking counts the check from now until it has run or
// cancelCheck took it back, so a stopping cluster can wait for it.
func (c *Cluster) scheduleCheck(d time.Duration, steady bool) {
	c.scheduled++
	c.checking.Add(1)
	c.pending.Store(c.scheduled)
	c.pool.checks.after(scheduledCheck{c: c, n: c.scheduled, steady: steady}, d)
}

// cancelCheck takes back the scheduled check unless it has started; it
// reports whether it did. Only the run goroutine calls it.
func (c *Cluster) cancelCheck() bool {
	if c.pending.Swap(0) == 0 {
		return false
	}
	c.checking.Done()
	return true
}

// runCheck runs s unless it was taken back (its queue entry stays until it
// is due, and is dropped here). A steady check runs on the worker; any
// other may wait for a dial slot or for a dead server's timeout, so it runs
// on a goroutine of its own, which the cluster's run goroutine waits for.
func (c *Cluster) runCheck(s scheduledCheck) {
	if !c.pending.CompareAndSwap(s.n, 0) {
		return
	}
	check := func() {
		defer c.checking.Done()
		r := c.check(c.ctx)
		select {
		case c.checkResults <- r:
		case <-c.ctx.Done():
		}
	}
	if s.steady && c.conns.anyOpen() {
		check()
		return
	}
	go check()
}

// nextCheck is the pause before the next check: SteadyHealthInterval after
// a good check and HealthInterval after a failed one (the detection bounds
// are worked out beside the PoolOptions defaults). The first steady pause
// is drawn from the whole interval, so a fleet connected at once (a
// restart, a burst of registrations) spreads its checks evenly over it
// instead of sending them in step for good. After a good check it also
// starts the facts' listing when one is due.
func (c *Cluster) nextCheck(ctx context.Context, r checkResult) time.Duration {
	if !r.ok {
		return c.pool.opts.HealthInterval
	}
	c.caches.refreshFacts(ctx)
	if !c.spread {
		c.spread = true
		return rand.N(c.pool.opts.SteadyHealthInterval) + 1 //nolint:gosec // spreading timers, not a secret
	}
	return c.pool.opts.SteadyHealthInterval
}

// dialSlotHold is the longest a check holds its dial slot. A live API
// server usually answers within it (one that takes longer only lets
// another dial start early); a dead one (a blackholed
// address, a server that never finishes the handshake) would otherwise
// hold the slot for the whole check timeout, and enough dead clusters
// would hold them all: each now counts for a second per check, so it takes
// 32 × 10 s of them (320, checked every HealthInterval) to fill the slots.
const dialSlotHold = time.Second

// check asks the API server whether it is ready to serve (GET /readyz, which
// also fails when its storage is down). It bypasses the client's rate limiter:
// a queue of writes must not make a healthy cluster look unreachable.
func (c *Cluster) check(ctx context.Context) checkResult {
	if !c.conns.anyOpen() {
		// This check opens the connection: it waits for a dial slot
		// (see defaultConcurrentDials), and its timeout starts after.
		select {
		case c.pool.dials <- struct{}{}:
			release := sync.OnceFunc(func() { <-c.pool.dials })
			held := time.AfterFunc(dialSlotHold, release)
			defer func() {
				held.Stop()
				release()
			}()
		case <-ctx.Done():
			return checkResult{message: msgAwaitingServer}
		}
	}
	checkCtx, cancel := context.WithTimeout(ctx, c.pool.opts.HealthTimeout)
	defer cancel()
	r, noAnswer := c.askReady(checkCtx)
	if noAnswer && ctx.Err() == nil {
		// A connection that gave no answer in time may be dead rather
		// than slow: the next check dials afresh instead of queueing
		// behind it, and the watches it carried resume from where they
		// were. A server that answered (not ready, overloaded) keeps its
		// connection and its watches: re-watching would only add load.
		c.conns.drop()
	}
	return r
}

// askReady asks /readyz; noAnswer says the request failed without an
// answer from the server.
func (c *Cluster) askReady(ctx context.Context) (r checkResult, noAnswer bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.target.Connection.Server+"/readyz", nil)
	if err != nil {
		return checkResult{message: "the server address cannot be used"}, false
	}
	resp, err := c.checks.Do(req)
	if err != nil {
		_, message := classify(ctx, err, c.pool.opts.HealthTimeout)
		return checkResult{message: message}, true
	}
	defer func() { _ = resp.Body.Close() }()
	// Drained (a little) so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		_, message := classifyStatus(int32(resp.StatusCode)) //nolint:gosec // HTTP status codes are three digits
		return checkResult{message: message}, false
	}
	return checkResult{ok: true}, false
}
