package auth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/test/oidctest"
)

// clock is a settable clock for the verifier.
type clock struct{ now atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.now.Store(time.Now().UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func verifier(issuer *oidctest.Issuer, c *clock) *auth.OIDC {
	return auth.NewOIDC(auth.OIDCOptions{
		IssuerURL: issuer.URL, Audience: "dcm-api", ClockSkew: 30 * time.Second,
		RoleClaims: []string{"realm_access.roles", "resource_access.dcm-api.roles"}, RolePrefix: "storage-gateway-",
		EnvironmentsClaim: "storage_gateway.environments", Now: c.Now, MaxLifetime: 24 * time.Hour,
	})
}

// claimEdits are a valid token's claims for subject with roles, and those
// claims with one claim set to a value, or left out.
func claimEdits(issuer *oidctest.Issuer, subject string, roles ...string) (valid func() map[string]any,
	with func(string, any) map[string]any, without func(string) map[string]any) {
	valid = func() map[string]any { return issuer.Claims(subject, roles...) }
	with = func(k string, v any) map[string]any {
		claims := valid()
		claims[k] = v
		return claims
	}
	without = func(k string) map[string]any {
		claims := valid()
		delete(claims, k)
		return claims
	}
	return valid, with, without
}

// bearer authenticates token through an Authenticator in OIDC mode.
func bearer(a *auth.Authenticator, token string) (auth.Principal, error) {
	r := httptest.NewRequest(http.MethodGet, "/api/v1alpha1/environments", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return a.Authenticate(r)
}

func TestOIDCAcceptsValidTokensWithTheirRolesAndScope(t *testing.T) {
	issuer := oidctest.Start(t)
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, newClock())})

	claims := issuer.Claims("alice", "admin", "viewer")
	// An unprefixed realm role named like a gateway role grants nothing.
	claims["realm_access"] = map[string]any{"roles": []any{"admin", "storage-gateway-dcm", 7}}
	p, err := bearer(a, issuer.Token(t, claims))
	if err != nil {
		t.Fatal(err)
	}
	if p.Subject != "alice" || p.Name != "alice-name" || p.Method != auth.MethodOIDC || p.Scoped() {
		t.Fatalf("principal %+v", p)
	}
	if got := fmt.Sprint(p.Roles); got != "[dcm admin viewer]" {
		t.Fatalf("roles %s, want dcm (realm) then admin and viewer (client)", got)
	}

	scoped := issuer.Claims("bob", "admin")
	scoped["storage_gateway"] = map[string]any{"environments": []any{"east", "Not An Id", "west"}}
	p, err = bearer(a, issuer.Token(t, scoped))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(p.Environments) != "[east west]" || !p.InScope("east") || p.InScope("north") {
		t.Fatalf("scope %v", p.Environments)
	}

	// ES256 is accepted too.
	issuer.AddKey(t, jose.ES256)
	c := newClock()
	c.Advance(time.Minute)
	a = auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, c)})
	if _, err := bearer(a, issuer.Token(t, issuer.Claims("carol", "viewer"))); err != nil {
		t.Fatalf("ES256 token: %v", err)
	}
}

// Every forgery and every invalid token is refused as invalid (401), never
// as an error of another kind.
func TestOIDCRefusesInvalidAndForgedTokens(t *testing.T) {
	issuer := oidctest.Start(t)
	other := oidctest.Start(t) // a real issuer, but not the configured one
	c := newClock()
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, c)})
	valid, with, _ := claimEdits(issuer, "mallory", "admin")
	now := time.Now()
	good := issuer.Token(t, valid())
	parts := strings.Split(good, ".")
	tamperedClaims := with("sub", "admin")
	tampered := parts[0] + "." + strings.Split(issuer.Token(t, tamperedClaims), ".")[1] + "." + parts[2]

	cases := map[string]string{
		"malformed":                  "not-a-jwt",
		"three garbage segments":     "a.b.c",
		"expired":                    issuer.Token(t, with("exp", now.Add(-time.Hour).Unix())),
		"expired beyond the skew":    issuer.Token(t, with("exp", now.Add(-45*time.Second).Unix())),
		"not yet valid":              issuer.Token(t, with("nbf", now.Add(time.Hour).Unix())),
		"not valid beyond the skew":  issuer.Token(t, with("nbf", now.Add(2*time.Minute).Unix())),
		"issued in the future":       issuer.Token(t, with("iat", now.Add(time.Hour).Unix())),
		"wrong issuer":               issuer.Token(t, with("iss", other.URL)),
		"signed by another issuer":   other.Token(t, valid()),
		"wrong audience":             issuer.Token(t, with("aud", []any{"account"})),
		"no subject":                 issuer.Token(t, with("sub", "")),
		"alg none":                   oidctest.Unsigned(valid()),
		"HS256 with the public key":  issuer.HMACWithPublicKey(t, valid()),
		"unknown kid":                issuer.TokenWithKid(t, "no-such-key", valid()),
		"tampered payload":           tampered,
		"signature of another token": parts[0] + "." + parts[1] + "." + strings.Split(issuer.Token(t, with("sub", "x")), ".")[2],
		"JSON serialization":         `{"payload":"e30","signatures":[]}`,
	}
	if _, err := bearer(a, good); err != nil {
		t.Fatalf("the valid token itself: %v", err)
	}
	for name, token := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := bearer(a, token)
			var invalid *auth.InvalidError
			if !errors.As(err, &invalid) {
				t.Fatalf("accepted or wrong error: %+v, %v", p, err)
			}
			if strings.Contains(err.Error(), token) {
				t.Fatal("the error repeats the token")
			}
		})
	}
	// Inside the skew is fine.
	for name, claims := range map[string]map[string]any{
		"expired 20s ago":      with("exp", now.Add(-20*time.Second).Unix()),
		"valid from 20s ahead": with("nbf", now.Add(20*time.Second).Unix()),
	} {
		if _, err := bearer(a, issuer.Token(t, claims)); err != nil {
			t.Errorf("%s: refused within the clock skew: %v", name, err)
		}
	}
}

// A flood of tokens naming random key ids costs the identity provider at
// most one JWKS fetch per 30 s cooldown; a key the issuer really rotated in
// is accepted on first sight once the cooldown has passed.
func TestUnknownKeyIDsFetchTheKeySetAtMostOncePerCooldown(t *testing.T) {
	issuer := oidctest.Start(t)
	c := newClock()
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, c)})
	if _, err := bearer(a, issuer.Token(t, issuer.Claims("alice", "admin"))); err != nil {
		t.Fatal(err)
	}
	base := issuer.JWKSFetches()
	if base != 1 {
		t.Fatalf("%d fetches for the first token, want 1", base)
	}
	flood := func() {
		var wg sync.WaitGroup
		for i := range 500 {
			wg.Go(func() {
				if _, err := bearer(a, issuer.TokenWithKid(t, fmt.Sprintf("random-%d-%d", c.Now().Unix(), i), issuer.Claims("x", "admin"))); err == nil {
					t.Error("a token with an unknown kid was accepted")
				}
			})
		}
		wg.Wait()
	}
	flood()
	if got := issuer.JWKSFetches() - base; got != 0 {
		t.Fatalf("a flood within the cooldown of the first fetch caused %d fetches, want 0", got)
	}
	c.Advance(31 * time.Second)
	flood()
	if got := issuer.JWKSFetches() - base; got != 1 {
		t.Fatalf("a flood after the cooldown caused %d fetches, want exactly 1", got)
	}

	// The issuer rotates its key; a token signed with the new key arrives
	// 10 s after the flood's fetch: refused, no fetch. After the cooldown it
	// is accepted on first sight, with one fetch.
	issuer.AddKey(t, jose.RS256)
	rotated := issuer.Token(t, issuer.Claims("alice", "admin"))
	c.Advance(10 * time.Second)
	if _, err := bearer(a, rotated); err == nil {
		t.Fatal("a new key was accepted inside the cooldown without a fetch")
	}
	if got := issuer.JWKSFetches() - base; got != 1 {
		t.Fatalf("%d fetches, want still 1", got)
	}
	c.Advance(21 * time.Second)
	if _, err := bearer(a, rotated); err != nil {
		t.Fatalf("the rotated key was not accepted after the cooldown: %v", err)
	}
	if got := issuer.JWKSFetches() - base; got != 2 {
		t.Fatalf("%d fetches, want 2", got)
	}
	// Known keys cost nothing per request.
	before := issuer.JWKSFetches()
	for range 100 {
		if _, err := bearer(a, rotated); err != nil {
			t.Fatal(err)
		}
	}
	if issuer.JWKSFetches() != before {
		t.Fatal("verifying a token with a known key fetched the key set")
	}
}

// A withdrawn key stops verifying once the cached key set is five minutes
// old (and the cache's minute is over): within six minutes.
func TestWithdrawnKeysStopVerifying(t *testing.T) {
	issuer := oidctest.Start(t)
	first := issuer.Token(t, issuer.Claims("alice", "admin"))
	c := newClock()
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, c)})
	if _, err := bearer(a, first); err != nil {
		t.Fatal(err)
	}
	withdrawn := issuer.SigningKeyID()
	issuer.AddKey(t, jose.RS256) // the new key signs from now on
	issuer.RemoveKey(withdrawn)
	c.Advance(4 * time.Minute)
	if _, err := bearer(a, first); err != nil {
		t.Fatalf("within five minutes the cached key still verifies: %v", err)
	}
	c.Advance(2 * time.Minute)
	if _, err := bearer(a, first); err == nil {
		t.Fatal("a key the issuer withdrew still verifies six minutes later")
	}
}

// A reload (SIGHUP) reads the key set at once and forgets verified tokens:
// a withdrawn key stops verifying immediately, while unknown key ids still
// fetch at most once per cooldown, counted from the reload's fetch.
func TestAReloadReadsTheKeySetAtOnce(t *testing.T) {
	issuer := oidctest.Start(t)
	token := issuer.Token(t, issuer.Claims("alice", "admin"))
	c := newClock()
	v := verifier(issuer, c)
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: v})
	if _, err := bearer(a, token); err != nil {
		t.Fatal(err)
	}
	withdrawn := issuer.SigningKeyID()
	issuer.AddKey(t, jose.RS256)
	issuer.RemoveKey(withdrawn)
	if _, err := bearer(a, token); err != nil {
		t.Fatalf("before the reload the cached token is still served: %v", err)
	}
	before := issuer.JWKSFetches()
	if err := v.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := issuer.JWKSFetches() - before; got != 1 {
		t.Fatalf("a reload made %d fetches, want 1", got)
	}
	if _, err := bearer(a, token); err == nil {
		t.Fatal("a token of a withdrawn key verified after the reload")
	}
	for i := range 50 {
		if _, err := bearer(a, issuer.TokenWithKid(t, fmt.Sprint("random-", i), issuer.Claims("x", "admin"))); err == nil {
			t.Fatal("a token with an unknown kid was accepted")
		}
	}
	if got := issuer.JWKSFetches() - before; got != 1 {
		t.Fatalf("unknown kids right after the reload made %d more fetches, want 0", got-1)
	}
	// The issuer is down: the reload fails, the keys held stay in use.
	fresh := issuer.Token(t, issuer.Claims("bob", "admin"))
	issuer.SetKeysDown(true)
	if err := v.Reload(t.Context()); err == nil {
		t.Fatal("a reload while the key set is down reported success")
	}
	if _, err := bearer(a, fresh); err != nil {
		t.Fatalf("a failed reload dropped the keys held: %v", err)
	}
}

// An issuer that cannot be reached makes verification unavailable (503), not
// invalid (401); once it is up, tokens verify.
func TestIssuerOutageIsUnavailableNotUnauthenticated(t *testing.T) {
	issuer := oidctest.Start(t)
	c := newClock()
	v := auth.NewOIDC(auth.OIDCOptions{IssuerURL: "http://127.0.0.1:1", Audience: "dcm-api", Now: c.Now})
	if err := v.Discover(context.Background()); !errors.Is(err, auth.ErrIssuerUnavailable) {
		t.Fatalf("discovery of a closed port: %v", err)
	}
	_, err := bearer(auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: v}), issuer.Token(t, issuer.Claims("a", "admin")))
	if !errors.Is(err, auth.ErrIssuerUnavailable) {
		t.Fatalf("a token while the issuer is down: %v", err)
	}
}

// A verified token is answered from the cache, but never after it expires,
// and never longer than a minute.
func TestVerifiedTokensAreCachedWithinTheirLifetime(t *testing.T) {
	issuer := oidctest.Start(t)
	c := newClock()
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, c)})
	short := issuer.Claims("alice", "admin")
	short["exp"] = c.Now().Add(20 * time.Second).Unix()
	token := issuer.Token(t, short)
	if _, err := bearer(a, token); err != nil {
		t.Fatal(err)
	}
	c.Advance(45 * time.Second) // within the minute, within exp + 30 s skew
	if _, err := bearer(a, token); err != nil {
		t.Fatalf("within its lifetime and the skew: %v", err)
	}
	c.Advance(10 * time.Second) // past exp + skew, still within the minute
	if _, err := bearer(a, token); err == nil {
		t.Fatal("an expired token was served from the cache")
	}

	longClaims := issuer.Claims("bob", "admin")
	longClaims["exp"] = c.Now().Add(3 * time.Hour).Unix()
	long := issuer.Token(t, longClaims)
	if _, err := bearer(a, long); err != nil {
		t.Fatal(err)
	}
	withdrawn := issuer.SigningKeyID()
	issuer.AddKey(t, jose.RS256)
	issuer.RemoveKey(withdrawn)
	c.Advance(30 * time.Second)
	if _, err := bearer(a, long); err != nil {
		t.Fatalf("within the cache's minute: %v", err)
	}
	c.Advance(2 * time.Hour) // cache entry and key set both old: re-verified, refused
	if _, err := bearer(a, long); err == nil {
		t.Fatal("a token signed by a withdrawn key was still accepted from the cache")
	}
}

// A key the issuer replaced under the same kid is picked up once the
// cooldown has passed, as a new kid would be.
func TestAKeyReplacedUnderTheSameIDIsFetchedAgain(t *testing.T) {
	issuer := oidctest.Start(t)
	c := newClock()
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, c)})
	if _, err := bearer(a, issuer.Token(t, issuer.Claims("alice", "admin"))); err != nil {
		t.Fatal(err)
	}
	issuer.ReplaceKeyKeepingID(t)
	token := issuer.Token(t, issuer.Claims("alice", "admin"))
	if _, err := bearer(a, token); err == nil {
		t.Fatal("a signature by an unfetched key verified")
	}
	c.Advance(31 * time.Second)
	if _, err := bearer(a, token); err != nil {
		t.Fatalf("the replaced key after the cooldown: %v", err)
	}
	if n := issuer.JWKSFetches(); n != 2 {
		t.Fatalf("%d key set fetches, want 2", n)
	}
}

// While the issuer's keys cannot be read, tokens are unavailable to check
// (503), not invalid (401).
func TestAKeySetOutageIsUnavailable(t *testing.T) {
	issuer := oidctest.Start(t)
	c := newClock()
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, c)})
	issuer.SetKeysDown(true)
	token := issuer.Token(t, issuer.Claims("alice", "admin"))
	for range 2 { // the fetch, then inside its cooldown
		if _, err := bearer(a, token); !errors.Is(err, auth.ErrIssuerUnavailable) {
			t.Fatalf("a token while the key set is down: %v", err)
		}
	}
	issuer.SetKeysDown(false)
	c.Advance(31 * time.Second)
	if _, err := bearer(a, token); err != nil {
		t.Fatalf("once the key set is back: %v", err)
	}
}

// The configured skew is the tolerance on nbf, up to its 5 minute maximum.
func TestTheClockSkewIsTheNotBeforeTolerance(t *testing.T) {
	issuer := oidctest.Start(t)
	v := auth.NewOIDC(auth.OIDCOptions{IssuerURL: issuer.URL, Audience: "dcm-api", ClockSkew: 5 * time.Minute,
		RoleClaims: []string{"resource_access.dcm-api.roles"}, RolePrefix: "storage-gateway-"})
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: v})
	for ahead, ok := range map[time.Duration]bool{150 * time.Second: true, 290 * time.Second: true, 6 * time.Minute: false} {
		claims := issuer.Claims("alice", "admin")
		claims["nbf"] = time.Now().Add(ahead).Unix()
		claims["iat"] = time.Now().Unix()
		if _, err := bearer(a, issuer.Token(t, claims)); (err == nil) != ok {
			t.Errorf("nbf %s ahead with a 5m skew: %v", ahead, err)
		}
	}
}
