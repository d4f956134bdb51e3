package auth_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/test/oidctest"
)

// payload writes claims as JSON with extra members appended by hand: a map
// cannot hold a duplicate or a second spelling of a name.
func payload(t *testing.T, claims map[string]any, extra string) []byte {
	t.Helper()
	raw, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	if extra == "" {
		return raw
	}
	return append(raw[:len(raw)-1], ","+extra+"}"...)
}

// Every token the issuer signed whose claims are ambiguous, of the wrong
// type, out of bounds or not an access token is refused as invalid; so are
// other spellings of a valid token.
func TestOIDCReadsTokensStrictly(t *testing.T) {
	issuer := oidctest.Start(t)
	c := newClock()
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, c)})
	valid, with, without := claimEdits(issuer, "alice", "viewer")
	now := time.Now()
	good := issuer.Token(t, valid())
	if _, err := bearer(a, good); err != nil {
		t.Fatalf("the valid token itself: %v", err)
	}
	// The signature of an RS256 token is 256 bytes: its last base64url
	// character carries 4 unused bits. Flipping one spells the same bytes.
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, good[len(good)-1])
	respelt := good[:len(good)-1] + string(alphabet[last^1])

	cases := map[string]string{
		"iss and a case variant of it": issuer.TokenOfPayload(t, payload(t, with("iss", "https://evil.example"), fmt.Sprintf("%q:%q", "Iss", issuer.URL))),
		"SUB beside sub":               issuer.TokenOfPayload(t, payload(t, valid(), `"SUB":"admin"`)),
		"SUB without sub":              issuer.TokenOfPayload(t, payload(t, without("sub"), `"SUB":"admin"`)),
		"Aud beside aud":               issuer.TokenOfPayload(t, payload(t, with("aud", "account"), `"Aud":"dcm-api"`)),
		"sub twice":                    issuer.TokenOfPayload(t, payload(t, valid(), `"sub":"admin"`)),
		"exp twice":                    issuer.TokenOfPayload(t, payload(t, valid(), fmt.Sprintf(`"exp":%d`, now.Add(1000*time.Hour).Unix()))),
		"a role claim's case variant":  issuer.TokenOfPayload(t, payload(t, valid(), `"Resource_access":{"dcm-api":{"roles":["storage-gateway-admin"]}}`)),
		"a nested member twice": issuer.TokenOfPayload(t, []byte(strings.Replace(string(payload(t, valid(), "")),
			`"roles":["storage-gateway-viewer"]`, `"roles":["storage-gateway-viewer"],"roles":["storage-gateway-admin"]`, 1))),
		"exp as a string":             issuer.Token(t, with("exp", fmt.Sprint(now.Add(time.Hour).Unix()))),
		"nbf as a string":             issuer.Token(t, with("nbf", fmt.Sprint(now.Add(time.Hour).Unix()))),
		"iat as a string":             issuer.Token(t, with("iat", fmt.Sprint(now.Add(time.Hour).Unix()))),
		"nbf beyond year 9999":        issuer.TokenOfPayload(t, payload(t, without("nbf"), `"nbf":1e19`)),
		"iat beyond year 9999":        issuer.TokenOfPayload(t, payload(t, without("iat"), `"iat":1e19`)),
		"exp beyond year 9999":        issuer.TokenOfPayload(t, payload(t, without("exp"), `"exp":1e19`)),
		"a negative iat":              issuer.Token(t, with("iat", -1)),
		"no iat":                      issuer.Token(t, without("iat")),
		"a lifetime over 24h":         issuer.Token(t, with("exp", now.Add(25*time.Hour).Unix())),
		"an ID token":                 issuer.Token(t, with("typ", "ID")),
		"a refresh token":             issuer.Token(t, with("typ", "Refresh")),
		"sub not a string":            issuer.Token(t, with("sub", 7)),
		"JSON serialization":          issuer.JSONSerialized(t, valid()),
		"other unused signature bits": respelt,
		"padded":                      good + "=",
		"a line break inside":         good[:20] + "\n" + good[20:],
	}
	for name, token := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := bearer(a, token)
			var invalid *auth.InvalidError
			if !errors.As(err, &invalid) {
				t.Fatalf("accepted or wrong error: %+v, %v", p, err)
			}
		})
	}
	// Keycloak's access tokens pass; typ and azp may be left out.
	for name, claims := range map[string]map[string]any{
		"no typ": without("typ"), "no azp": without("azp"), "no nbf": without("nbf"),
		"a fractional exp": with("exp", float64(now.Add(time.Hour).UnixMilli())/1000),
	} {
		if _, err := bearer(a, issuer.Token(t, claims)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// With authorized parties configured, only their tokens pass.
func TestOIDCAuthorizedParties(t *testing.T) {
	issuer := oidctest.Start(t)
	v := auth.NewOIDC(auth.OIDCOptions{IssuerURL: issuer.URL, Audience: "dcm-api", RoleClaims: []string{"resource_access.dcm-api.roles"},
		RolePrefix: "storage-gateway-", AuthorizedParties: []string{"dcm-cli", "dcm-ui"}})
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: v})
	for azp, ok := range map[any]bool{"dcm-cli": true, "dcm-ui": true, "other-client": false, nil: false, 7: false} {
		claims := issuer.Claims("alice", "viewer")
		if azp == nil {
			delete(claims, "azp")
		} else {
			claims["azp"] = azp
		}
		if _, err := bearer(a, issuer.Token(t, claims)); (err == nil) != ok {
			t.Errorf("azp %v: %v", azp, err)
		}
	}
}

// A scope claim of the wrong shape at any step of its path scopes the
// principal to nothing; only a claim that is absent leaves it unscoped.
func TestOIDCMalformedScopeClaimsScopeToNothing(t *testing.T) {
	issuer := oidctest.Start(t)
	v := auth.NewOIDC(auth.OIDCOptions{IssuerURL: issuer.URL, Audience: "dcm-api", RoleClaims: []string{"resource_access.dcm-api.roles"},
		RolePrefix: "storage-gateway-", EnvironmentsClaim: "sg.environments"})
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: v})
	for name, sg := range map[string]any{
		"parent a string": "east", "parent a list": []any{"east"}, "parent a number": 7, "parent null": nil,
		"claim a string": map[string]any{"environments": "east"}, "claim an object": map[string]any{"environments": map[string]any{"east": true}},
		"a number in the list": map[string]any{"environments": []any{"east", 7}},
		"claim null":           map[string]any{"environments": nil},
	} {
		claims := issuer.Claims("alice", "viewer")
		claims["sg"] = sg
		p, err := bearer(a, issuer.Token(t, claims))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !p.Scoped() || p.InScope("east") || len(p.Environments) != 0 {
			t.Errorf("%s: scope %#v, want none", name, p.Environments)
		}
	}
	for name, sg := range map[string]any{"no sg": nil, "sg without the claim": map[string]any{"other": 1}} {
		claims := issuer.Claims("bob", "viewer")
		if sg != nil {
			claims["sg"] = sg
		}
		p, err := bearer(a, issuer.Token(t, claims))
		if err != nil || p.Scoped() {
			t.Errorf("%s: %+v %v, want unscoped", name, p, err)
		}
	}
}

// Subjects and names reach the principal cleaned and bounded: no control,
// format or bidirectional character, at most 256 bytes and a marker.
func TestOIDCCleansSubjectsAndNames(t *testing.T) {
	issuer := oidctest.Start(t)
	a := auth.New(auth.Options{Mode: auth.ModeOIDC, Tokens: verifier(issuer, newClock())})
	claims := issuer.Claims("alice\x00\u202Eevil\u2066\u200B\x1b[31m\u0085", "viewer")
	claims["preferred_username"] = strings.Repeat("ä", 400)
	p, err := bearer(a, issuer.Token(t, claims))
	if err != nil {
		t.Fatal(err)
	}
	if p.Subject != "alice  evil   [31m " {
		t.Errorf("subject %q", p.Subject)
	}
	if len(p.Name) > 256+len("…(truncated)") || !strings.HasSuffix(p.Name, "…(truncated)") {
		t.Errorf("name of %d bytes: %q", len(p.Name), p.Name)
	}
}
