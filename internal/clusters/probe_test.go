package clusters_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/egress"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// loopback allows the local test servers.
var loopback = egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// http2Server is a TLS test server that speaks HTTP/2, as API servers do:
// a cluster's checks and watches share the connection its first check
// opened.
func http2Server(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestProbeNeverFollowsRedirects(t *testing.T) {
	var targetHits atomic.Int32
	target := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { targetHits.Add(1) }))
	defer target.Close()
	redirector := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()

	token := "redirect-canary-token-0123456789"
	conn := kubeconfig.Connection{Server: redirector.URL, CAData: pemCert(redirector.Certificate().Raw), Token: token}
	prober := clusters.NewProber(clusters.ProberOptions{Client: clusters.ClientOptions{Egress: loopback}, Timeout: 5 * time.Second})
	res := prober.Probe(context.Background(), "env", conn, []string{"dcm"})
	if res.State != clusters.HealthUnreachable || !strings.Contains(res.Message, "redirect") {
		t.Fatalf("probe = %+v, want UNREACHABLE because of a redirect", res)
	}
	if n := targetHits.Load(); n != 0 {
		t.Fatalf("redirect target received %d requests; the token must never leave for it", n)
	}
	if strings.Contains(res.Message, token) || strings.Contains(res.Message, target.URL) {
		t.Fatal("probe message leaks the token or the redirect target")
	}
}

func TestProbeOfAServerThatIsNotKubernetes(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.Error(w, "<html>attacker-controlled body</html>", http.StatusBadGateway)
	}))
	defer srv.Close()
	conn := kubeconfig.Connection{Server: srv.URL, CAData: pemCert(srv.Certificate().Raw), Token: "t0ken"}
	res := clusters.NewProber(clusters.ProberOptions{Client: clusters.ClientOptions{Egress: loopback}, Timeout: 5 * time.Second}).Probe(context.Background(), "env", conn, []string{"dcm"})
	if res.State != clusters.HealthUnreachable || hits.Load() == 0 {
		t.Fatalf("probe = %+v after %d requests", res, hits.Load())
	}
	if strings.Contains(res.Message, "attacker") || !strings.Contains(res.Message, "502") {
		t.Fatalf("message %q must name the status and never repeat the body", res.Message)
	}
}
