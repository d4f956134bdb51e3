package dcm_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/dcm"
	"github.com/dcm-project/storage-gateway/test/oidctest"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// fakeDCM records the Authorization header of every registration call.
func fakeDCM(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(dcmAPI(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "provider-1", "name": "storage-gateway-east",
			"endpoint": "x", "service_type": "storage", "schema_version": "v1alpha1"})
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// runRegistrar runs a registrar with opts (serving every instance and
// repeating no status unless opts say otherwise) until the test ends, and
// returns it.
func runRegistrar(t *testing.T, opts dcm.Options) *dcm.Registrar {
	t.Helper()
	if opts.Served == nil {
		opts.Served = servedAll
	}
	if opts.Repeat == nil {
		opts.Repeat = repeatNone
	}
	r, err := dcm.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func waitCalls(t *testing.T, calls func() []string, n int) []string {
	t.Helper()
	poll.Until(t, 20*time.Second, fmt.Sprintf("%d calls to DCM", n), func() bool { return len(calls()) >= n })
	return calls()
}

// A token file is read for every call: a rotated token is sent from the
// next call on.
func TestRegistrationSendsTheTokenFile(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	environment(t, reg)
	srv, calls := fakeDCM(t)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runRegistrar(t, dcm.Options{URL: srv.URL, PublicURL: "https://gateway.example.com", Environments: reg.Registry, Owned: reg.Member(t, "replica-1"),
		Interval: time.Second, Logger: slog.New(slog.DiscardHandler), Credentials: dcm.Credentials{TokenFile: file}})
	if got := waitCalls(t, calls, 1); got[0] != "Bearer first-token" {
		t.Fatalf("Authorization %q", got[0])
	}
	if err := os.WriteFile(file, []byte("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := len(calls())
	if got := waitCalls(t, calls, n+2); got[len(got)-1] != "Bearer second-token" {
		t.Fatalf("after rotation: %q", got[len(got)-1])
	}
	if strings.Contains(reg.Logs.String(), "second-token") {
		t.Fatal("the token reached the log")
	}
}

// A redirect from "DCM" is not followed: the token would go with it.
func TestRegistrationNeverFollowsARedirectWithItsToken(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	environment(t, reg)
	elsewhere, calls := fakeDCM(t)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("redirect-canary-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	runRegistrar(t, dcm.Options{URL: redirector.URL, PublicURL: "https://gateway.example.com", Environments: reg.Registry, Owned: reg.Member(t, "replica-1"),
		Interval: time.Second, Logger: slog.New(slog.DiscardHandler), Credentials: dcm.Credentials{TokenFile: file}})
	poll.Until(t, 3*time.Second, "a registration outcome recorded", func() bool { return registration(t, reg).State != "" })
	poll.Never(t, time.Second, "the redirect target received a call (and the token)", func() bool { return len(calls()) != 0 })
}

// With client credentials every call carries a token from the issuer that
// has not expired; it is fetched again shortly before it would.
func TestRegistrationUsesClientCredentials(t *testing.T) {
	issuer := oidctest.Start(t)
	issuer.SetTokenLifetime(14 * time.Second)
	reg := registrytest.New(t, registrytest.Options{})
	environment(t, reg)
	srv, calls := fakeDCM(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(issuer.ClientSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	runRegistrar(t, dcm.Options{URL: srv.URL, PublicURL: "https://gateway.example.com", Environments: reg.Registry, Owned: reg.Member(t, "replica-1"),
		Interval: time.Second, Logger: slog.New(slog.DiscardHandler), Credentials: dcm.Credentials{
			ClientID: issuer.ClientID, ClientSecretFile: secret, TokenURL: issuer.URL + "/token"}})
	got := waitCalls(t, calls, 8)
	tokens := map[string]bool{}
	for _, header := range got {
		token, ok := strings.CutPrefix(header, "Bearer ")
		if !ok {
			t.Fatalf("a call without a bearer token: %q", header)
		}
		tokens[token] = true
		if exp := expiry(t, token); time.Until(exp) < -time.Second {
			t.Fatalf("a call carried a token that expired at %s", exp)
		}
	}
	// 8 calls a second apart with 14 s tokens refreshed 10 s early: a new
	// token every 4 s or so, never one per call.
	if n := issuer.TokenRequests(); n < 2 || n > 4 || len(tokens) != int(n) {
		t.Fatalf("%d token requests and %d distinct tokens for %d calls", n, len(tokens), len(got))
	}
	if strings.Contains(reg.Logs.String(), issuer.ClientSecret) {
		t.Fatal("the client secret reached the log")
	}
}

func expiry(t *testing.T, jwt string) time.Time {
	t.Helper()
	parts := strings.Split(jwt, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	return time.Unix(claims.Exp, 0)
}
