package clusters

import (
	"context"
	"net/http"
	"sync"
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
	bucket  *rate.Limiter
	// requests counts what the environment's clients send, by use (nil:
	// not counted).
	requests *prometheus.CounterVec

	mu sync.Mutex
	// throttledAt is the last halving, raisedAt the last step back up.
	throttledAt, raisedAt time.Time
}

func newPacedLimiter(qps float32, burst int) *pacedLimiter {
	return &pacedLimiter{ceiling: rate.Limit(qps), burst: burst, bucket: rate.NewLimiter(rate.Limit(qps), burst)}
}

// setRate changes the rate, and caps the burst at one second's worth while
// slowed down, so the tokens a healthy environment had saved up are not
// spent on a cluster that just pushed back.
func (l *pacedLimiter) setRate(now time.Time, r rate.Limit) {
	burst := l.burst
	if r < l.ceiling {
		burst = min(burst, max(1, int(r)))
	}
	l.bucket.SetBurstAt(now, burst)
	l.bucket.SetLimitAt(now, r)
}

// throttled slows the environment down: its cluster answered 429.
func (l *pacedLimiter) throttled(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.throttledAt) < throttleGap {
		return // one halving per burst of 429s from requests in flight together
	}
	l.setRate(now, max(l.bucket.Limit()/2, l.ceiling/minShare))
	l.throttledAt, l.raisedAt = now, now
}

// recover raises a slowed rate by one step per second since the last 429
// (or the last step).
func (l *pacedLimiter) recover(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	current := l.bucket.Limit()
	steps := now.Sub(l.raisedAt) / time.Second
	if current >= l.ceiling || steps < 1 {
		return
	}
	l.setRate(now, min(l.ceiling, current+rate.Limit(steps)*l.ceiling/recoverSteps))
	l.raisedAt = l.raisedAt.Add(steps * time.Second)
}

// waitFor is how long n requests at once wait for tokens at the current
// rate (slowed down, or drained by other requests): a probe's deadline
// allows for it, since the wait is the gateway's own pacing, not the
// cluster's slowness.
func (l *pacedLimiter) waitFor(n int) time.Duration {
	now := time.Now()
	l.recover(now)
	missing := float64(n) - l.bucket.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / float64(l.bucket.Limit()) * float64(time.Second))
}

// TryAccept, Accept, Wait, QPS and Stop are flowcontrol.RateLimiter.
func (l *pacedLimiter) TryAccept() bool { l.recover(time.Now()); return l.bucket.Allow() }
func (l *pacedLimiter) Accept()         { _ = l.Wait(context.Background()) }
func (l *pacedLimiter) Stop()           {}
func (l *pacedLimiter) QPS() float32    { return float32(l.bucket.Limit()) }
func (l *pacedLimiter) Wait(ctx context.Context) error {
	l.recover(time.Now())
	return l.bucket.Wait(ctx)
}

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
