package api_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/test/oidctest"
)

// firstSightTokens is how many distinct tokens first-sight signs up front.
const firstSightTokens = 2001

// authMode is one way of calling the benchmark's handler.
type authMode struct {
	name string
	h    http.Handler
	// token returns the bearer token of request i ("" for none).
	token func(i int) string
}

// BenchmarkAuthentication measures what authentication adds to a request:
// the same cheap authenticated read (an empty fleet's StorageClasses,
// through routing, the guard and contract validation) with authentication
// disabled (the baseline) and with each way of authenticating, interleaved
// so all see the same machine noise.
//
//   - repeat-token: a static token, and an OIDC bearer JWT (RS256, keys
//     cached) presented again and again, as DCM, dashboards and the CLI do.
//   - first-sight: a different OIDC JWT on every request: the full
//     verification (signature, claims) with the issuer's keys cached.
//
// A repeated token is verified in full once and then served from the
// verified-token cache (test/benchreport holds what it may add to the p99);
// it fails when any request calls the identity provider. first-sight
// reports the full verification's cost without a target: each token pays
// it once a minute at most.
//
// go test ./internal/api -run '^$' -bench Authentication -benchtime 2000x -count 3
func BenchmarkAuthentication(b *testing.B) {
	issuer := oidctest.Start(b)
	logger := slog.New(slog.DiscardHandler)
	handler := func(a *auth.Authenticator) http.Handler {
		return api.New(api.Options{Logger: logger, Metrics: prometheus.NewRegistry(), Fleet: fleet.NewIndex(), Auth: a, Audit: testAudit(nil, logger)})
	}
	oidcHandler := func() http.Handler {
		return handler(auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: auth.NewOIDC(auth.OIDCOptions{IssuerURL: issuer.URL,
			Audience: "dcm-api", ClockSkew: 30 * time.Second, RoleClaims: []string{"resource_access.dcm-api.roles"}, RolePrefix: "storage-gateway-"})}))
	}
	none := func(int) string { return "" }
	disabled := authMode{"disabled", handler(auth.New(auth.Options{Mode: auth.ModeDisabled})), none}
	b.Run("repeat-token", func(b *testing.B) {
		jwt := issuer.Token(b, issuer.Claims("bench", "viewer"))
		runAuthModes(b, issuer, []authMode{disabled,
			{"static", handler(testAuth(b)), func(int) string { return adminToken }},
			{"oidc", oidcHandler(), func(int) string { return jwt }},
		})
	})
	b.Run("first-sight", func(b *testing.B) {
		// Signed before the loop, so signing does not disturb the timing;
		// each is presented once (the pool bounds -benchtime).
		tokens := make([]string, firstSightTokens)
		for i := range tokens {
			claims := issuer.Claims("bench", "viewer")
			claims["jti"] = fmt.Sprint("bench-", i)
			tokens[i] = issuer.Token(b, claims)
		}
		runAuthModes(b, issuer, []authMode{disabled, {"oidc", oidcHandler(), func(i int) string {
			if i+1 >= len(tokens) {
				b.Fatalf("first-sight ran out of its %d tokens: use -benchtime %dx or less", len(tokens), len(tokens)-1)
			}
			return tokens[i+1]
		}}})
	})
}

// runAuthModes serves one request per mode per iteration, in rotating
// order, and reports each mode's p50, p99 and what it adds to the
// baseline's (modes[0]) p99.
func runAuthModes(b *testing.B, issuer *oidctest.Issuer, modes []authMode) {
	const path = "/api/v1alpha1/storage-classes"
	for _, m := range modes {
		serve(b, m.h, path, m.token(-1)) // warm up: discovery and the key set, once
	}
	calls := issuer.JWKSFetches()
	times := make([][]time.Duration, len(modes))
	for i := 0; b.Loop(); i++ {
		for j := range modes {
			k := (i + j) % len(modes)
			times[k] = append(times[k], serve(b, modes[k].h, path, modes[k].token(i)))
		}
	}
	base := percentile(times[0], 0.99)
	b.ReportMetric(float64(percentile(times[0], 0.50))/1e3, "disabled-p50-µs")
	b.ReportMetric(float64(base)/1e3, "disabled-p99-µs")
	for k, m := range modes[1:] {
		p99 := percentile(times[k+1], 0.99)
		b.ReportMetric(float64(percentile(times[k+1], 0.50))/1e3, m.name+"-p50-µs")
		b.ReportMetric(float64(p99)/1e3, m.name+"-p99-µs")
		b.ReportMetric(float64(p99-base)/1e3, m.name+"-added-p99-µs")
		b.ReportMetric(float64(p99)/float64(base), m.name+"-p99-ratio")
	}
	perRequest := float64(issuer.JWKSFetches()-calls) / float64(b.N)
	b.ReportMetric(perRequest, "idp-calls/request")
	if perRequest != 0 {
		b.Errorf("%d calls to the identity provider during the benchmark", issuer.JWKSFetches()-calls)
	}
}
