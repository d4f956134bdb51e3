package clusters_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

func TestRemoveReleasesEverything(t *testing.T) {
	p := newPool(t, fast)
	// Three ways an environment ends: removed while still connecting,
	// removed once synced, removed with a replacement pending.
	cycle := func(i int) {
		target := eastTarget(fmt.Sprintf("pool-cycle-%d", i))
		switch i % 3 {
		case 0:
			if err := p.Ensure(target); err != nil {
				t.Fatal(err)
			}
		case 1:
			ensureReady(t, p, target)
		case 2:
			ensureReady(t, p, target)
			target.Namespaces = target.Namespaces[:1]
			if err := p.Ensure(target); err != nil {
				t.Fatal(err)
			}
		}
		p.Remove(target.EnvironmentID)
	}
	// client-go starts a few process-wide goroutines on first use.
	for i := range 3 {
		cycle(i)
	}
	time.Sleep(time.Second)
	before := goroutines()

	start := time.Now()
	for i := range 50 {
		cycle(i)
	}
	t.Logf("50 Ensure/Remove cycles took %s", time.Since(start))
	// Connections close asynchronously once released.
	// A plain loop: a polling helper would add goroutines of its own.
	leaked := grown(before, goroutines())
	for deadline := time.Now().Add(10 * time.Second); len(leaked) > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		leaked = grown(before, goroutines())
	}
	if len(leaked) > 0 {
		t.Errorf("leaked goroutines:\n%s", strings.Join(leaked, "\n"))
	}
}

// goroutines counts the process's goroutines by call stack (function names
// only, so the same code at another line of a loop counts as the same).
func goroutines() map[string]int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	counts := map[string]int{}
	for block := range strings.SplitSeq(buf.String(), "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		head := strings.Fields(lines[0])
		if len(head) < 2 || head[1] != "@" {
			continue // the "goroutine profile: total N" header, or nothing
		}
		n, _ := strconv.Atoi(head[0])
		var funcs []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) >= 3 {
				funcs = append(funcs, strings.Split(f[2], "+")[0])
			}
		}
		counts[strings.Join(funcs, "\n\t")] += n
	}
	return counts
}

// grown lists the stacks that have more goroutines now than before.
func grown(before, after map[string]int) []string {
	var out []string
	for stack, n := range after {
		if n > before[stack] {
			out = append(out, fmt.Sprintf("%d more of\n\t%s", n-before[stack], stack))
		}
	}
	return out
}

// TestFailingClusterIsNotHammered counts the LISTs and WATCHes reaching a
// server whose health endpoint answers but whose resources fail: informers
// must back off, not retry in a loop. The rate limiter is opened wide so it
// cannot hide a hot loop.
func TestFailingClusterIsNotHammered(t *testing.T) {
	const window = 6 * time.Second
	tests := []struct {
		name   string
		status int
	}{
		{"lists fail", http.StatusServiceUnavailable},
		{"lists forbidden", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/readyz" {
					_, _ = w.Write([]byte("ok"))
					return
				}
				requests.Add(1)
				http.Error(w, "attacker-controlled body", tt.status)
			}))
			defer srv.Close()

			var logs syncbuf.Buffer
			opts := fast
			opts.SyncTimeout = 2 * time.Second
			opts.Client.QPS, opts.Client.Burst = 1000, 1000
			opts.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			p := newPool(t, opts)
			target := clusters.Target{
				EnvironmentID: "pool-failing",
				Connection:    kubeconfig.Connection{Server: srv.URL, CAData: pemCert(srv.Certificate().Raw), Token: "t0ken"},
				Namespaces:    []string{"dcm-volumes", "dcm-scratch"},
			}
			if err := p.Ensure(target); err != nil {
				t.Fatal(err)
			}
			time.Sleep(window)
			c, _ := p.Get(target.EnvironmentID)
			if h := c.Health(); h.State != clusters.HealthUnreachable || !strings.Contains(h.Message, "no cache synced within 2s") {
				t.Errorf("health after the sync deadline = %+v, want UNREACHABLE: no cache synced", h)
			}
			p.Remove(target.EnvironmentID)

			// 7 informers; each attempt is a watch-list request and a
			// fallback LIST; backoff starts at 0.8s and doubles with jitter,
			// so at most 4 attempts fit into the window.
			n := requests.Load()
			t.Logf("%d requests in %s", n, window)
			if n < 7 || n > 7*2*5 {
				t.Errorf("%d LIST/WATCH requests in %s; want every informer to try, with backoff", n, window)
			}
			if out := logs.String(); strings.Contains(out, "attacker") || !strings.Contains(out, `"environment":"pool-failing"`) ||
				!strings.Contains(out, fmt.Sprintf("HTTP status %d", tt.status)) {
				t.Errorf("logs must name the environment and status, never the body:\n%s", out)
			}
		})
	}
}

// TestNewConnectionsAreBounded starts more clusters than there are dial
// slots, each holding the first health check on a new connection for a
// while: no more than the slots are in flight at once, and every cluster
// gets its answer in turn, none made unreachable while it waits. (That a
// check's timeout starts only once it has its slot is not shown here: a
// check that gave up waiting fails once, retries and looks the same.)
func TestNewConnectionsAreBounded(t *testing.T) {
	const hold = 150 * time.Millisecond
	var mu sync.Mutex
	seen := map[string]bool{} // client connections that sent a request
	inFlight, most, answered := 0, 0, 0
	firstCheck := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			<-r.Context().Done() // the caches never sync: only the checks matter here
			return
		}
		mu.Lock()
		first := !seen[r.RemoteAddr]
		seen[r.RemoteAddr] = true
		if first {
			inFlight++
			most = max(most, inFlight)
		}
		mu.Unlock()
		if first {
			time.Sleep(hold)
			mu.Lock()
			inFlight--
			answered++
			mu.Unlock()
		}
		_, _ = w.Write([]byte("ok"))
	})
	var targets []clusters.Target
	for i := range 6 {
		srv := http2Server(t, firstCheck)
		targets = append(targets, clusters.Target{
			EnvironmentID: fmt.Sprintf("pool-dial-%d", i),
			Connection:    kubeconfig.Connection{Server: srv.URL, CAData: pemCert(srv.Certificate().Raw), Token: "t0ken"},
			Namespaces:    []string{"dcm-volumes"},
		})
	}
	opts := fast
	opts.ConcurrentDials = 2
	opts.HealthTimeout = 2 * hold // the last round waits two holds for its slot
	p := newPool(t, opts)
	for _, target := range targets {
		if err := p.Ensure(target); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 10*time.Second, "every cluster's first check answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return answered == len(targets)
	})
	mu.Lock()
	defer mu.Unlock()
	if most != opts.ConcurrentDials {
		t.Errorf("%d first checks on new connections were in flight at once; want the %d slots used and never more", most, opts.ConcurrentDials)
	}
	for _, target := range targets {
		if c, ok := p.Get(target.EnvironmentID); !ok || c.Health().State == clusters.HealthUnreachable {
			t.Errorf("%s: %+v; waiting for a slot must not make a cluster unreachable", target.EnvironmentID, c.Health())
		}
	}
}

// TestAHungDialHoldsItsSlotBriefly: a cluster that accepts the
// connection and never finishes the TLS handshake holds the only dial slot
// for at most a second, not for its whole check timeout, so a healthy
// cluster added after it gets its first answer within about that.
func TestAHungDialHoldsItsSlotBriefly(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- conn // held open, never answered
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for len(accepted) > 0 {
			_ = (<-accepted).Close()
		}
	})
	var answered atomic.Bool
	healthy := http2Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			<-r.Context().Done()
			return
		}
		answered.Store(true)
		_, _ = w.Write([]byte("ok"))
	}))

	opts := fast
	opts.ConcurrentDials = 1
	opts.HealthTimeout = 10 * time.Second // the hung check's own timeout: far longer than a slot is held
	p := newPool(t, opts)
	hung := eastTarget("pool-hung-dial")
	hung.Connection.Server = "https://" + ln.Addr().String()
	if err := p.Ensure(hung); err != nil {
		t.Fatal(err)
	}
	select {
	case conn := <-accepted: // the hung check holds the slot now
		accepted <- conn
	case <-time.After(5 * time.Second):
		t.Fatal("the hung cluster's first check never connected")
	}
	if err := p.Ensure(clusters.Target{
		EnvironmentID: "pool-after-hung-dial",
		Connection:    kubeconfig.Connection{Server: healthy.URL, CAData: pemCert(healthy.Certificate().Raw), Token: "t0ken"},
		Namespaces:    []string{"dcm-volumes"},
	}); err != nil {
		t.Fatal(err)
	}
	took := poll.Until(t, 3*time.Second, "the healthy cluster's first check answered behind the hung one", answered.Load)
	t.Logf("the healthy cluster's first check was answered %s after it was added", took.Round(time.Millisecond))
	if took < 500*time.Millisecond {
		t.Errorf("answered after %s: the hung check did not hold the only slot, so this shows nothing", took)
	}
}

// TestInitialSyncsAreBounded starts more slow clusters (answering health
// checks, never answering a LIST) than there are sync slots: the rest must
// queue, and take a slot when one frees.
func TestInitialSyncsAreBounded(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		<-r.Context().Done()
	})
	var targets []clusters.Target
	for i := range 6 {
		srv := httptest.NewTLSServer(slow)
		t.Cleanup(srv.Close) // after the pool's Close, which ends the hanging requests
		targets = append(targets, clusters.Target{
			EnvironmentID: fmt.Sprintf("pool-slow-%d", i),
			Connection:    kubeconfig.Connection{Server: srv.URL, CAData: pemCert(srv.Certificate().Raw), Token: "t0ken"},
			Namespaces:    []string{"dcm-volumes"},
		})
	}
	opts := fast
	opts.SyncTimeout = time.Minute
	opts.ConcurrentSyncs = 4
	p := newPool(t, opts)
	for _, target := range targets {
		if err := p.Ensure(target); err != nil {
			t.Fatal(err)
		}
	}
	syncing := func() (ids []string, waiting int) {
		for _, target := range targets {
			c, ok := p.Get(target.EnvironmentID)
			switch {
			case !ok:
			case c.Health().Message == "syncing caches":
				ids = append(ids, target.EnvironmentID)
			case strings.HasPrefix(c.Health().Message, "waiting to sync"):
				waiting++
			}
		}
		return ids, waiting
	}
	poll.Until(t, 5*time.Second, "4 syncing, 2 queued", func() bool {
		ids, waiting := syncing()
		return len(ids) == 4 && waiting == 2
	})
	ids, _ := syncing()
	p.Remove(ids[0])
	poll.Until(t, 5*time.Second, "a queued cluster takes the free slot", func() bool {
		ids, waiting := syncing()
		return len(ids) == 4 && waiting == 1
	})
}
