package clusters

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Pacing of an environment's requests when its API server pushes back.
// API Priority and Fairness answers 429 (with Retry-After, which client-go
// honours for the request itself); the environment's whole rate then
// halves, at most once per throttleGap, down to ceiling/minShare, and
// climbs back by ceiling/recoverSteps per second without a 429.
const (
	throttleGap  = time.Second
	minShare     = 64
	recoverSteps = 20
)

// pacedLimiter is one environment's request limiter: a token bucket at the
// configured rate — a safety ceiling, not the pace of a healthy cluster —
// that slows down when the cluster answers 429 and recovers when it stops.
// It implements client-go's flowcontrol.RateLimiter.
type pacedLimiter struct {
	ceiling rate.Limit
	burst   int
	// bucket is replaced, empty, at every halving (see throttled).
	bucket atomic.Pointer[rate.Limiter]
	// requests counts what the environment's clients send, by use (nil:
	// not counted).
	requests *prometheus.CounterVec

	mu sync.Mutex
	// throttledAt is the last halving, raisedAt the last step back up.
	throttledAt, raisedAt time.Time
	// slowed is closed, and replaced, at every halving: requests waiting
	// for a slot in the old bucket book one in the new.
	slowed chan struct{}
}

func newPacedLimiter(qps float32, burst int) *pacedLimiter {
	l := &pacedLimiter{ceiling: rate.Limit(qps), burst: burst, slowed: make(chan struct{})}
	l.bucket.Store(rate.NewLimiter(rate.Limit(qps), burst))
	return l
}

// burstAt is the burst at rate r: one second's worth at most while slowed
// down.
func (l *pacedLimiter) burstAt(r rate.Limit) int {
	if r < l.ceiling {
		return min(l.burst, max(1, int(r)))
	}
	return l.burst
}

// throttled slows the environment down: its cluster answered 429.
func (l *pacedLimiter) throttled(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.throttledAt) < throttleGap {
		return // one halving per burst of 429s from requests in flight together
	}
	// A new, empty bucket at half the rate: the tokens a healthy
	// environment had saved up are not spent on a cluster that just pushed
	// back, and the slots booked in the old bucket are void — their
	// requests book again in this one (Wait).
	r := max(l.bucket.Load().Limit()/2, l.ceiling/minShare)
	slower := rate.NewLimiter(r, l.burstAt(r))
	slower.AllowN(now, slower.Burst())
	l.bucket.Store(slower)
	l.throttledAt, l.raisedAt = now, now
	close(l.slowed)
	l.slowed = make(chan struct{})
}

// slowedSignal is closed at the next halving.
func (l *pacedLimiter) slowedSignal() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slowed
}

// recover raises a slowed rate by one step per second since the last 429
// (or the last step).
func (l *pacedLimiter) recover(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	bucket := l.bucket.Load()
	current := bucket.Limit()
	steps := now.Sub(l.raisedAt) / time.Second
	if current >= l.ceiling || steps < 1 {
		return
	}
	raised := min(l.ceiling, current+rate.Limit(steps)*l.ceiling/recoverSteps)
	bucket.SetBurstAt(now, l.burstAt(raised))
	bucket.SetLimitAt(now, raised)
	l.raisedAt = l.raisedAt.Add(steps * time.Second)
}

// waitFor is how long n requests at once wait for tokens at the current
// rate (slowed down, or drained by other requests): a probe's deadline
// allows for it, since the wait is the gateway's own pacing, not the
// cluster's slowness.
func (l *pacedLimiter) waitFor(n int) time.Duration {
	now := time.Now()
	l.recover(now)
	bucket := l.bucket.Load()
	missing := float64(n) - bucket.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / float64(bucket.Limit()) * float64(time.Second))
}

// TryAccept, Accept, Wait, QPS and Stop are flowcontrol.RateLimiter.
func (l *pacedLimiter) TryAccept() bool { l.recover(time.Now()); return l.bucket.Load().Allow() }
func (l *pacedLimiter) Accept()         { _ = l.Wait(context.Background()) }
func (l *pacedLimiter) Stop()           {}
func (l *pacedLimiter) QPS() float32    { return float32(l.bucket.Load().Limit()) }

// Wait books the next slot at the current pace and waits for it; when the
// cluster pushes back meanwhile, it books again in the slower bucket, so
// requests already waiting slow down too (a plain token bucket keeps their
// slots).
func (l *pacedLimiter) Wait(ctx context.Context) error {
	for {
		now := time.Now()
		l.recover(now)
		slowed := l.slowedSignal()
		booked := l.bucket.Load().ReserveN(now, 1) // OK: the burst is at least 1
		delay := booked.DelayFrom(now)
		if delay == 0 {
			return nil
		}
		if deadline, ok := ctx.Deadline(); ok && deadline.Before(now.Add(delay)) {
			booked.CancelAt(now)
			return errWouldExceedDeadline
		}
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
			return nil
		case <-slowed: // the slot was in a bucket thrown away
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			booked.Cancel()
			return ctx.Err()
		}
	}
}

// errWouldExceedDeadline: the request's slot comes after its deadline.
var errWouldExceedDeadline = errors.New("rate: the next request slot comes after the context's deadline")

// pacedTransport counts every request an environment's client sends and
// tells the limiter about every 429 it receives.
type pacedTransport struct {
	next    http.RoundTripper
	limiter *pacedLimiter
	sent    prometheus.Counter // nil: not counted
}

func newPacedTransport(next http.RoundTripper, limiter *pacedLimiter, use string) pacedTransport {
	t := pacedTransport{next: next, limiter: limiter}
	if limiter.requests != nil {
		t.sent = limiter.requests.WithLabelValues(use)
	}
	return t
}

func (t pacedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.sent != nil {
		t.sent.Inc()
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		t.limiter.throttled(time.Now())
	}
	return resp, err
}

// WrappedRoundTripper lets client-go and connection tracking find the
// transport beneath.
func (t pacedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }
