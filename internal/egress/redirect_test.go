package egress

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

const canaryToken = "canary-3b9f0d6c41e2"

// bearerTransport adds the token to every request it sends, as client-go's
// bearer round tripper does. It re-adds what net/http strips on cross-host
// redirects, which is why NoRedirects must stop them.
type bearerTransport struct {
	next http.RoundTripper
}

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+canaryToken)
	return b.next.RoundTrip(req)
}

// redirectFixture is a redirecting "cluster" A and a target B, both real TLS
// servers on loopback, and a client wired the way cluster clients must be.
type redirectFixture struct {
	redirector, target *httptest.Server
	tokensAtRedirector atomic.Int32
	targetHits         atomic.Int32
	transport          *http.Transport
}

func newRedirectFixture(t *testing.T) *redirectFixture {
	t.Helper()
	f := &redirectFixture{}
	f.target = httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		f.targetHits.Add(1)
	}))
	t.Cleanup(f.target.Close)
	f.redirector = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+canaryToken {
			f.tokensAtRedirector.Add(1)
		}
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		http.Redirect(w, r, f.target.URL+"/api/v1/namespaces", status)
	}))
	t.Cleanup(f.redirector.Close)

	roots := x509.NewCertPool()
	roots.AddCert(f.redirector.Certificate())
	roots.AddCert(f.target.Certificate())
	loopback := Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	f.transport = &http.Transport{
		DialContext:     loopback.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}
	t.Cleanup(f.transport.CloseIdleConnections)
	return f
}

func (f *redirectFixture) client(tokenInTransport bool) *http.Client {
	var rt http.RoundTripper = f.transport
	if tokenInTransport {
		rt = bearerTransport{next: f.transport}
	}
	return &http.Client{Transport: rt, CheckRedirect: NoRedirects}
}

func (f *redirectFixture) get(t *testing.T, client *http.Client, rawURL string, tokenInHeader bool) error {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tokenInHeader {
		req.Header.Set("Authorization", "Bearer "+canaryToken)
	}
	resp, err := client.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	return err
}

func TestNoRedirects(t *testing.T) {
	statuses := []int{
		http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect,
	}
	tokenPlacements := []struct {
		name        string
		inTransport bool
	}{
		{"token in request", false},
		{"token in transport", true},
	}
	for _, status := range statuses {
		for _, token := range tokenPlacements {
			t.Run(strconv.Itoa(status)+"/"+token.name, func(t *testing.T) {
				f := newRedirectFixture(t)
				rawURL := f.redirector.URL + "/?status=" + strconv.Itoa(status)
				err := f.get(t, f.client(token.inTransport), rawURL, !token.inTransport)
				assertRedirectRefused(t, f, err)
			})
		}
	}
}

func assertRedirectRefused(t *testing.T, f *redirectFixture, err error) {
	t.Helper()
	if !errors.Is(err, ErrRedirect) {
		t.Fatalf("error = %v, want one wrapping ErrRedirect", err)
	}
	if n := f.tokensAtRedirector.Load(); n != 1 {
		t.Fatalf("redirector saw the token %d times, want 1 (the canary must be in play)", n)
	}
	if n := f.targetHits.Load(); n != 0 {
		t.Fatalf("redirect target received %d requests, want 0", n)
	}
	if strings.Contains(err.Error(), canaryToken) {
		t.Errorf("error text leaks the token: %v", err)
	}
	// net/http's *url.Error carries the Location value (see NoRedirects);
	// what NoRedirects itself says must name neither target nor token.
	var urlErr *url.Error
	if !errors.As(err, &urlErr) {
		t.Fatalf("error = %v (%T), want a *url.Error from net/http", err, err)
	}
	for _, secret := range []string{f.target.URL, f.target.Listener.Addr().String(), canaryToken} {
		if strings.Contains(urlErr.Err.Error(), secret) {
			t.Errorf("NoRedirects error %q contains %q", urlErr.Err, secret)
		}
	}
}

// The target is reachable through the same client, so zero hits in
// TestNoRedirects come from NoRedirects, not from a dialer refusal.
func TestNoRedirectsClientReachesTarget(t *testing.T) {
	f := newRedirectFixture(t)
	if err := f.get(t, f.client(true), f.target.URL, false); err != nil {
		t.Fatalf("direct request to target: %v", err)
	}
	if n := f.targetHits.Load(); n != 1 {
		t.Fatalf("target received %d requests, want 1", n)
	}
}
