package clusters

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dcm-project/storage-gateway/internal/egress"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// A 429 halves the environment's rate, once per burst of them, down to a
// floor; without 429s it climbs back to the ceiling in steps.
func TestPacedLimiterBacksOffAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newPacedLimiter(100, 100)
		l.throttled(time.Now())
		l.throttled(time.Now()) // the same burst of 429s
		if got := l.QPS(); got != 50 {
			t.Fatalf("after a burst of 429s: %v qps, want 50", got)
		}
		allowed := 0
		for l.TryAccept() {
			allowed++
		}
		if allowed > 50 {
			t.Fatalf("right after a 429, %d requests went out at once; want at most a second's worth (50)", allowed)
		}
		time.Sleep(throttleGap)
		for range 10 {
			l.throttled(time.Now())
			time.Sleep(throttleGap)
		}
		if got, floor := l.QPS(), float32(100)/minShare; got != floor {
			t.Fatalf("after 429s for 10 s: %v qps, want the floor %v", got, floor)
		}
		time.Sleep(5 * time.Second) // 6 s after the last 429
		l.recover(time.Now())
		if got, want := l.QPS(), float32(100)/minShare+6*100/recoverSteps; got != want {
			t.Fatalf("6 s without a 429: %v qps, want %v (6 steps of 5)", got, want)
		}
		time.Sleep(30 * time.Second)
		l.recover(time.Now())
		if got := l.QPS(); got != 100 {
			t.Fatalf("35 s without a 429: %v qps, want the ceiling 100", got)
		}
	})
}

// An API server that answers every request 429 (Retry-After: 1) is backed
// off, not hammered: eight callers for three seconds reach it a few times
// each, as client-go waits Retry-After and the environment's limiter slows
// every client of it.
func TestAnAPIServerAnswering429IsBackedOff(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"kind":"Status","code":429}`, http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	limiters := NewLimiters(1000, 1000)
	c, err := NewClient(kubeconfig.Connection{Server: srv.URL, CAData: cert, Token: "t"}, ClientOptions{
		Egress:      egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		RateLimiter: limiters.forEnvironment("busy"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, _ = c.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
			}
		})
	}
	wg.Wait()
	t.Logf("%d requests reached the API server; the environment's rate is %v qps", hits.Load(), limiters.forEnvironment("busy").QPS())
	// At the 1,000 qps ceiling eight callers would send thousands.
	if n := hits.Load(); n > 8*4 {
		t.Fatalf("the API server answering 429 received %d requests in 3 s from 8 callers", n)
	}
	if got := limiters.forEnvironment("busy").QPS(); got > 250 {
		t.Fatalf("the environment's rate is still %v after 429s", got)
	}
}

// A probe's deadline allows for the pacing at the environment's current
// rate: slowed down by a 429, the same probe needs longer.
func TestPacedLimiterWaitFollowsTheCurrentRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newPacedLimiter(200, 40)
		if got := l.waitFor(100); got != 300*time.Millisecond {
			t.Fatalf("100 requests at 200 qps with 40 saved: wait %s, want 300ms", got)
		}
		l.throttled(time.Now())
		if got := l.waitFor(100); got != time.Second {
			t.Fatalf("after a 429 (100 qps, nothing saved): wait %s, want 1s", got)
		}
	})
}

// Requests already waiting for a slot slow down with the environment: a
// 429 halves the pace of those booked before it too, not only of those
// that come after.
func TestWaitingRequestsSlowDownWithTheCluster(t *testing.T) {
	lastSlot := func(throttle bool) time.Duration {
		var took time.Duration
		synctest.Test(t, func(t *testing.T) {
			l := newPacedLimiter(100, 1)
			l.TryAccept() // the saved token: every waiter below waits
			start := time.Now()
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					if err := l.Wait(context.Background()); err != nil {
						t.Error(err)
					}
				})
			}
			synctest.Wait() // every waiter has booked its slot
			if throttle {
				l.throttled(time.Now())
			}
			wg.Wait()
			took = time.Since(start)
		})
		return took
	}
	// 20 slots at 100 qps: the last one after 200 ms; at 50 qps, 400 ms.
	if steady := lastSlot(false); steady != 200*time.Millisecond {
		t.Fatalf("20 waiters at 100 qps: the last went after %s, want 200ms", steady)
	}
	if slowed := lastSlot(true); slowed < 390*time.Millisecond || slowed > 410*time.Millisecond {
		t.Fatalf("20 waiters, then a 429 (50 qps): the last went after %s, want about 400ms", slowed)
	}
}
