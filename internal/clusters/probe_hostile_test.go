package clusters_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// hostileServer answers like a Kubernetes API server that grants every
// permission, with a /version body the test chooses and a hook run on every
// /version request. Its authorizer cannot list rules (an incomplete rules
// review, as behind a webhook), so the probe asks an access review per
// permission: every request the probe can send is exercised.
func hostileServer(t *testing.T, version func(w http.ResponseWriter), onVersion func()) (kubeconfig.Connection, *atomic.Int32) {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/version":
			if onVersion != nil {
				onVersion()
			}
			version(w)
		case strings.HasSuffix(r.URL.Path, "/selfsubjectrulesreviews"):
			_, _ = w.Write([]byte(`{"kind":"SelfSubjectRulesReview","apiVersion":"authorization.k8s.io/v1","status":{"resourceRules":[],"nonResourceRules":[],"incomplete":true}}`))
		case strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews"):
			_, _ = w.Write([]byte(`{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","status":{"allowed":true}}`))
		case strings.HasSuffix(r.URL.Path, "/storageclasses"):
			_, _ = w.Write([]byte(`{"kind":"StorageClassList","apiVersion":"storage.k8s.io/v1","items":[]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return kubeconfig.Connection{Server: srv.URL, CAData: pemCert(srv.Certificate().Raw), Token: "hostile-canary-token"}, &requests
}

func versionBody(gitVersion string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		_ = json.NewEncoder(w).Encode(map[string]string{"major": "1", "minor": "36", "gitVersion": gitVersion})
	}
}

func newProber(opts clusters.ProberOptions) *clusters.Prober {
	opts.Client.Egress = loopback
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	return clusters.NewProber(opts)
}

// A cluster's answers are read with a bound: a /version of 64 MiB is
// refused, not stored.
func TestProbeRefusesAnOversizedAnswer(t *testing.T) {
	conn, _ := hostileServer(t, func(w http.ResponseWriter) {
		_, _ = w.Write([]byte(`{"gitVersion":"`))
		chunk := []byte(strings.Repeat("v", 1<<20))
		for range 64 {
			if _, err := w.Write(chunk); err != nil {
				return // the gateway hung up: good
			}
		}
		_, _ = w.Write([]byte(`"}`))
	}, nil)
	res := newProber(clusters.ProberOptions{}).Probe(context.Background(), "hostile", conn, []string{"dcm"})
	if res.State != clusters.HealthUnreachable || !strings.Contains(res.Message, "larger than the gateway accepts") || res.KubernetesVersion != "" {
		t.Fatalf("probe of an oversized /version: %+v", res)
	}
}

// Only a plausible version string is kept: escape sequences, forged log
// lines and endless digits are dropped, and the probe says so.
func TestProbeKeepsOnlyAPlausibleVersion(t *testing.T) {
	for _, tc := range []struct{ served, kept string }{
		{"v1.36.3", "v1.36.3"},
		{"v1.30.2-eks-1234567", "v1.30.2-eks-1234567"},
		{"v1.29.4+k3s1", "v1.29.4+k3s1"},
		{"\x1b]0;pwned\x07v1.36.3", ""},
		{"v1.36.3\n{\"level\":\"INFO\",\"msg\":\"audit\"}", ""},
		{strings.Repeat("9", 100), ""},
		{"v1.36.3-" + strings.Repeat("a", 60), ""},
	} {
		conn, _ := hostileServer(t, versionBody(tc.served), nil)
		res := newProber(clusters.ProberOptions{}).Probe(context.Background(), "hostile", conn, []string{"dcm"})
		if res.State != clusters.HealthReady || res.KubernetesVersion != tc.kept {
			t.Errorf("version %q: %+v, want READY keeping %q", tc.served, res, tc.kept)
		}
		if tc.kept == "" && !strings.Contains(res.Message, "no valid version") {
			t.Errorf("version %q dropped without saying so: %q", tc.served, res.Message)
		}
	}
}

// Probes of one environment share its rate limiter (with its pool
// connection): two at once take twice as long as one; probes of different
// environments do not wait for each other.
func TestProbesOfOneEnvironmentShareItsRateLimit(t *testing.T) {
	conn, requests := hostileServer(t, versionBody("v1.36.3"), nil)
	// A rules review, an access review per permission, /version,
	// StorageClasses, the cluster's identity.
	perProbe := 1 + len(clusters.RequiredPermissions([]string{"dcm"})) + 3
	probeTwice := func(ids ...string) time.Duration {
		p := newProber(clusters.ProberOptions{Limiters: clusters.NewLimiters(10, perProbe)})
		start := time.Now()
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				if res := p.Probe(context.Background(), id, conn, []string{"dcm"}); res.State != clusters.HealthReady {
					t.Errorf("probe %s: %+v", id, res)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	shared := probeTwice("east", "east")
	// The second probe's requests wait for tokens at 10 per second.
	if floor := time.Duration(perProbe) * 100 * time.Millisecond * 8 / 10; shared < floor {
		t.Fatalf("two probes of one environment took %s, want at least %s (one burst, then 10/s)", shared, floor)
	}
	if separate := probeTwice("east", "west"); separate > shared*2/3 {
		t.Fatalf("probes of two environments took %s, as long as %s for one shared limit", separate, shared)
	}
	if n := int(requests.Load()); n != 4*perProbe {
		t.Fatalf("%d requests, want %d", n, 4*perProbe)
	}
}

// At most Concurrency probes are in flight across all environments.
func TestProbesInFlightAreCapped(t *testing.T) {
	var inFlight, peak atomic.Int32
	release := make(chan struct{})
	conn, _ := hostileServer(t, versionBody("v1.36.3"), func() {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
	})
	p := newProber(clusters.ProberOptions{Concurrency: 2})
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() { p.Probe(context.Background(), fmt.Sprint("env-", i), conn, []string{"dcm"}) })
	}
	poll.Until(t, 10*time.Second, "two probes in flight", func() bool { return inFlight.Load() >= 2 })
	poll.Never(t, 300*time.Millisecond, "a third probe in flight", func() bool { return peak.Load() != 2 })
	close(release)
	wg.Wait()
	if got := peak.Load(); got > 2 {
		t.Fatalf("peak of %d probes in flight, want at most 2", got)
	}
}

// An environment with many namespaces needs more reviews than its
// rate limit's burst: the probe's deadline allows for the pacing, which is
// the gateway's own, not the cluster's slowness.
func TestAProbeOfManyNamespacesFitsItsRateLimit(t *testing.T) {
	conn, requests := hostileServer(t, versionBody("v1.36.3"), nil)
	namespaces := make([]string, 33)
	for i := range namespaces {
		namespaces[i] = fmt.Sprint("ns-", i)
	}
	p := newProber(clusters.ProberOptions{Timeout: 500 * time.Millisecond, Limiters: clusters.NewLimiters(200, 40)})
	if res := p.Probe(context.Background(), "wide", conn, namespaces); res.State != clusters.HealthReady {
		t.Fatalf("probe of 33 namespaces: %+v after %d requests", res, requests.Load())
	}
}
