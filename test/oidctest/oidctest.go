// Package oidctest runs a real OpenID Connect issuer in tests: discovery,
// a JWKS of real RSA and ECDSA keys that can be rotated, the OAuth 2.0
// device authorization grant and client credentials grant, and tokens signed
// the way Keycloak signs them — plus the malformed and forged ones an
// attacker would try. It counts what it serves, so tests can bound how often
// the gateway calls it. It must never be imported by production code.
package oidctest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Issuer is a running issuer on loopback (plain HTTP, which the gateway
// accepts for a loopback issuer only).
type Issuer struct {
	URL string
	// ClientID and ClientSecret are accepted by the client credentials grant.
	ClientID, ClientSecret string

	srv *httptest.Server

	mu   sync.Mutex
	keys []key // published, newest first; the first signs by default

	jwksFetches, tokenRequests atomic.Int64
	// keysDown makes the JWKS endpoint answer 503.
	keysDown atomic.Bool
	// pendingPolls is how many device-code polls answer
	// authorization_pending before the grant succeeds.
	pendingPolls atomic.Int64
	// tokenLifetime of tokens the token endpoint issues.
	tokenLifetime atomic.Int64
}

type key struct {
	kid    string
	alg    jose.SignatureAlgorithm
	signer crypto.Signer
}

// Start runs an issuer with one RSA key until the test ends.
func Start(t testing.TB) *Issuer {
	t.Helper()
	i := &Issuer{ClientID: "storage-gateway", ClientSecret: "client-secret-canary-3d1f"}
	i.tokenLifetime.Store(int64(time.Hour))
	i.pendingPolls.Store(1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", i.discovery)
	mux.HandleFunc("GET /keys", i.jwks)
	mux.HandleFunc("POST /device", i.device)
	mux.HandleFunc("POST /token", i.token)
	i.srv = httptest.NewServer(mux)
	i.URL = i.srv.URL
	t.Cleanup(i.srv.Close)
	i.AddKey(t, jose.RS256)
	return i
}

// AddKey publishes a new key (RS256 or ES256), which then signs by default,
// and returns its kid: a key rotation at the issuer.
func (i *Issuer) AddKey(t testing.TB, alg jose.SignatureAlgorithm) string {
	t.Helper()
	var signer crypto.Signer
	var err error
	switch alg {
	case jose.RS256:
		signer, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		signer, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		t.Fatalf("oidctest: unsupported algorithm %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	k := key{kid: fmt.Sprintf("key-%d-%s", len(i.keys)+1, alg), alg: alg, signer: signer}
	i.keys = append([]key{k}, i.keys...)
	return k.kid
}

// ReplaceKeyKeepingID swaps the signing key for a new one published under
// the same kid: a rotation some issuers make.
func (i *Issuer) ReplaceKeyKeepingID(t testing.TB) {
	t.Helper()
	signer, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.keys[0] = key{kid: i.keys[0].kid, alg: jose.RS256, signer: signer}
}

// SetKeysDown makes the JWKS endpoint fail (true) or answer again.
func (i *Issuer) SetKeysDown(down bool) { i.keysDown.Store(down) }

// SigningKeyID is the kid of the key that signs by default.
func (i *Issuer) SigningKeyID() string { return i.newest().kid }

// RemoveKey stops publishing a key.
func (i *Issuer) RemoveKey(kid string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.keys = slices.DeleteFunc(i.keys, func(k key) bool { return k.kid == kid })
}

// JWKSFetches is how many times the key set was fetched.
func (i *Issuer) JWKSFetches() int64 { return i.jwksFetches.Load() }

// TokenRequests is how many requests the token endpoint answered.
func (i *Issuer) TokenRequests() int64 { return i.tokenRequests.Load() }

// SetTokenLifetime sets the lifetime of tokens the token endpoint issues.
func (i *Issuer) SetTokenLifetime(d time.Duration) { i.tokenLifetime.Store(int64(d)) }

// Claims are a token's claims: valid for the gateway's defaults (audience
// dcm-api, an hour's lifetime) with roles as Keycloak puts them in client
// roles, prefixed as the gateway expects, and Keycloak's typ and azp of an
// access token.
func (i *Issuer) Claims(subject string, roles ...string) map[string]any {
	now := time.Now()
	prefixed := make([]any, len(roles))
	for j, r := range roles {
		prefixed[j] = "storage-gateway-" + r
	}
	return map[string]any{
		"iss": i.URL, "sub": subject, "aud": []any{"dcm-api", "account"}, "preferred_username": subject + "-name",
		"typ": "Bearer", "azp": "dcm-cli",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"realm_access":    map[string]any{"roles": []any{"offline_access"}},
		"resource_access": map[string]any{"dcm-api": map[string]any{"roles": prefixed}},
	}
}

// Token signs claims with the newest key.
func (i *Issuer) Token(t testing.TB, claims map[string]any) string {
	t.Helper()
	k := i.newest()
	return must(t)(k.sign(k.kid, claims))
}

// TokenWithKid signs claims with the newest key but names kid in the header.
func (i *Issuer) TokenWithKid(t testing.TB, kid string, claims map[string]any) string {
	t.Helper()
	return must(t)(i.newest().sign(kid, claims))
}

// TokenOfPayload signs payload as it is — JSON written by hand, with
// members a map cannot hold (duplicates, case variants) — with the newest key.
func (i *Issuer) TokenOfPayload(t testing.TB, payload []byte) string {
	t.Helper()
	return must(t)(i.signed(t, payload).CompactSerialize())
}

// JSONSerialized is claims validly signed with the newest key, in the JWS
// JSON serialization (flattened) rather than the compact one.
func (i *Issuer) JSONSerialized(t testing.TB, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return i.signed(t, payload).FullSerialize()
}

// signed is payload signed with the newest key.
func (i *Issuer) signed(t testing.TB, payload []byte) *jose.JSONWebSignature {
	t.Helper()
	k := i.newest()
	s, err := k.newSigner(k.kid)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	return jws
}

// Unsigned is a token with `alg: none` and no signature.
func Unsigned(claims map[string]any) string {
	return encodeSegment(map[string]any{"alg": "none", "typ": "JWT"}) + "." + encodeSegment(claims) + "."
}

// HMACWithPublicKey is the classic key-confusion forgery: HS256 "signed" with
// the issuer's public key, named by the real kid.
func (i *Issuer) HMACWithPublicKey(t testing.TB, claims map[string]any) string {
	t.Helper()
	k := i.newest()
	pub, err := json.Marshal(jose.JSONWebKey{Key: k.signer.Public(), KeyID: k.kid})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: pub},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.kid))
	if err != nil {
		t.Fatal(err)
	}
	return must(t)(compact(signer, claims))
}

func (i *Issuer) newest() key {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.keys[0]
}

// sign signs claims with k, naming kid in the header.
func (k key) sign(kid string, claims map[string]any) (string, error) {
	s, err := k.newSigner(kid)
	if err != nil {
		return "", err
	}
	return compact(s, claims)
}

// newSigner signs with k, naming kid in a header of type JWT.
func (k key) newSigner(kid string) (jose.Signer, error) {
	return jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.signer, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
}

func compact(s jose.Signer, claims map[string]any) (string, error) {
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	jws, err := s.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

// must fails t on an error and returns the value otherwise.
func must(t testing.TB) func(string, error) string {
	return func(v string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func encodeSegment(v any) string {
	raw, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(raw)
}

func (i *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": i.URL, "jwks_uri": i.URL + "/keys", "token_endpoint": i.URL + "/token",
		"authorization_endpoint":                i.URL + "/auth",
		"device_authorization_endpoint":         i.URL + "/device",
		"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		"grant_types_supported":                 []string{"urn:ietf:params:oauth:grant-type:device_code", "client_credentials"},
	})
}

func (i *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	i.jwksFetches.Add(1)
	if i.keysDown.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "unavailable"})
		return
	}
	i.mu.Lock()
	set := jose.JSONWebKeySet{}
	for _, k := range i.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.signer.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	i.mu.Unlock()
	writeJSON(w, http.StatusOK, set)
}

// device starts a device authorization (RFC 8628).
func (i *Issuer) device(w http.ResponseWriter, r *http.Request) {
	if r.ParseForm() != nil || r.PostForm.Get("client_id") == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_client"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"device_code": "device-code-1", "user_code": "ABCD-EFGH", "verification_uri": i.URL + "/activate",
		"verification_uri_complete": i.URL + "/activate?user_code=ABCD-EFGH", "expires_in": 60, "interval": 1,
	})
}

// token answers the device code grant (after pendingPolls pending answers),
// the refresh token grant and the client credentials grant.
func (i *Issuer) token(w http.ResponseWriter, r *http.Request) {
	i.tokenRequests.Add(1)
	if r.ParseForm() != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request"})
		return
	}
	lifetime := time.Duration(i.tokenLifetime.Load())
	var claims map[string]any
	switch r.PostForm.Get("grant_type") {
	case "urn:ietf:params:oauth:grant-type:device_code":
		if r.PostForm.Get("device_code") != "device-code-1" {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant"})
			return
		}
		if i.pendingPolls.Add(-1) >= 0 {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "authorization_pending"})
			return
		}
		claims = i.Claims("cli-user", "admin")
	case "refresh_token":
		if !strings.HasPrefix(r.PostForm.Get("refresh_token"), "refresh-") {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant"})
			return
		}
		claims = i.Claims("cli-user", "admin")
	case "client_credentials":
		id, secret, ok := r.BasicAuth()
		if !ok {
			id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		if id != i.ClientID || secret != i.ClientSecret {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid_client"})
			return
		}
		claims = i.Claims("service-account-"+id, "dcm")
	default:
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "unsupported_grant_type"})
		return
	}
	claims["exp"] = time.Now().Add(lifetime).Unix()
	claims["jti"] = fmt.Sprint("token-", i.tokenRequests.Load()) // every token differs
	k := i.newest()
	token, err := k.sign(k.kid, claims)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "server_error"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"access_token": token, "token_type": "Bearer",
		"expires_in": int(lifetime.Seconds()), "refresh_token": "refresh-" + fmt.Sprint(i.tokenRequests.Load())})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
