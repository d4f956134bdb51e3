package clusters

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// limiterIdle is how long an environment's limiter is kept while no pool
// connection holds it (a probe of an environment that was never registered,
// say).
const limiterIdle = 10 * time.Minute

// Limiters holds one request rate limiter per environment, shared by every
// client the gateway builds for it — the pool's lists, health checks and
// writes, and every probe — so that however many connections, rotations and
// :verify calls are in flight, the cluster sees at most the configured rate
// of requests from the gateway. (client-go never throttles watches, nor the
// watch-based initial lists of its informers.) Every request they pace,
// and the watches and health checks they do not, is counted by use
// (storage_gateway_cluster_requests_total), so an operator sees what the
// gateway costs each cluster.
type Limiters struct {
	qps      float32
	burst    int
	requests *prometheus.CounterVec

	mu      sync.Mutex
	entries map[string]*limiterEntry
	swept   time.Time
}

type limiterEntry struct {
	limiter  *pacedLimiter
	refs     int // pool connections holding it
	lastUsed time.Time
}

// NewLimiters returns limiters of qps requests per second with burst.
func NewLimiters(qps float32, burst int) *Limiters {
	return &Limiters{qps: qps, burst: burst, entries: map[string]*limiterEntry{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "storage_gateway", Subsystem: "cluster",
			Name: "requests_total", Help: "Requests sent to the environments' API servers, by use: watch (informers' lists and watches), health, write, probe."},
			[]string{"use"})}
}

// Register exposes the request counts in reg.
func (l *Limiters) Register(reg prometheus.Registerer) error { return reg.Register(l.requests) }

// forEnvironment returns the environment's limiter.
func (l *Limiters) forEnvironment(environmentID string) *pacedLimiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entry(environmentID).limiter
}

// acquire holds the environment's limiter for a pool connection, which
// releases it when it stops; a held limiter is never dropped.
func (l *Limiters) acquire(environmentID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entry(environmentID).refs++
}

func (l *Limiters) release(environmentID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[environmentID]; e != nil {
		e.refs--
		e.lastUsed = time.Now()
	}
}

// entry finds or makes the environment's entry, first dropping entries
// nobody held for limiterIdle. The caller holds mu.
func (l *Limiters) entry(environmentID string) *limiterEntry {
	now := time.Now()
	if now.Sub(l.swept) > limiterIdle {
		for id, e := range l.entries {
			if e.refs == 0 && now.Sub(e.lastUsed) > limiterIdle {
				delete(l.entries, id)
			}
		}
		l.swept = now
	}
	e := l.entries[environmentID]
	if e == nil {
		e = &limiterEntry{limiter: newPacedLimiter(l.qps, l.burst)}
		e.limiter.requests = l.requests
		l.entries[environmentID] = e
	}
	e.lastUsed = now
	return e
}

// maxResponseBytes bounds each answer read outside the informers — the
// probe's /version and access reviews, health checks, a PVC written: real
// ones are a few KiB; a hostile API server must not choose how much memory
// the gateway spends. The watch client, whose lists can be long, is not
// bounded.
const maxResponseBytes = 4 << 20

// ErrResponseTooLarge is a cluster's answer longer than the client accepts.
var ErrResponseTooLarge = errors.New("the API server's answer is larger than the gateway accepts")

// boundedBodies limits every response body read through it to max bytes:
// the probe, health checks and writes read whole bodies into memory, and a
// hostile API server would otherwise choose how much (a 64 MiB version
// string was once accepted and stored). Informers list through a client
// without it.
type boundedBodies struct {
	next http.RoundTripper
	max  int64
}

func (b boundedBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if resp.ContentLength > b.max {
		_ = resp.Body.Close()
		return nil, ErrResponseTooLarge
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: b.max}
	return resp, nil
}

// WrappedRoundTripper lets client-go and connection tracking find the
// transport beneath.
func (b boundedBodies) WrappedRoundTripper() http.RoundTripper { return b.next }

type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than allowed tells a body at the limit from one over
		// it; the underlying reader's own answer (EOF, an error, nothing
		// yet) is passed on.
		var probe [1]byte
		n, err := b.ReadCloser.Read(probe[:])
		if n > 0 {
			return 0, ErrResponseTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
