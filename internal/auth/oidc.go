package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
)

// discoveryRetry is the least time between two failed attempts to read the
// issuer's discovery document; until one succeeds, callers get
// ErrIssuerUnavailable.
const discoveryRetry = 5 * time.Second

// ErrIssuerUnavailable means the identity provider's discovery document
// could not be read yet, so no token can be verified (503, not 401).
var ErrIssuerUnavailable = errors.New("the identity provider cannot be reached")

// OIDCOptions configure bearer JWT verification.
type OIDCOptions struct {
	// IssuerURL is the issuer; its discovery document names the JWKS URL.
	IssuerURL string
	// Audience must appear in the token's `aud`.
	Audience string
	// RoleClaims are dotted paths to string arrays of role names, e.g.
	// Keycloak's realm_access.roles and resource_access.<client>.roles.
	RoleClaims []string
	// RolePrefix is stripped from role names; names without it are ignored,
	// so an unrelated realm role called "admin" grants nothing.
	RolePrefix string
	// EnvironmentsClaim, if set, is the claim (a dotted path, like a role
	// claim) whose string array limits the principal to those environments;
	// a token without it is unscoped.
	EnvironmentsClaim string
	// SigningAlgs are the accepted JWS algorithms (default RS256, ES256).
	SigningAlgs []string
	// ClockSkew is the tolerance on exp, nbf and iat.
	ClockSkew time.Duration
	// MaxLifetime bounds a token's exp − iat (0: no bound): a token minted
	// to live for years is refused even though it verifies.
	MaxLifetime time.Duration
	// AuthorizedParties, if set, are the clients (azp) whose tokens are
	// accepted; by default any client of the realm whose token names the
	// audience.
	AuthorizedParties []string
	// HTTPClient reaches the issuer (default: one with a 10 s timeout).
	HTTPClient *http.Client
	// Now is the clock (tests move it); default time.Now.
	Now func() time.Time
}

// OIDC verifies bearer JWTs issued by one OpenID Connect issuer (Keycloak,
// as DCM uses) with coreos/go-oidc, over a key set whose re-fetches are
// rate-limited.
type OIDC struct {
	opts OIDCOptions
	algs []jose.SignatureAlgorithm

	// current is set once the issuer's discovery document was read.
	current atomic.Pointer[discovered]

	mu            sync.Mutex
	discovering   bool
	lastDiscovery time.Time

	verified verifiedTokens
	// names are the claim names read strictly (claims.go).
	names claimNames
}

// discovered is what the issuer's discovery document yields.
type discovered struct {
	verifier *oidc.IDTokenVerifier
	keys     *keySet
}

// NewOIDC returns a verifier; the issuer is contacted on first use (or by
// Discover), so a gateway starts while its identity provider is down.
func NewOIDC(opts OIDCOptions) *OIDC {
	if len(opts.SigningAlgs) == 0 {
		opts.SigningAlgs = []string{string(jose.RS256), string(jose.ES256)}
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: keyFetchTimeout}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	o := &OIDC{opts: opts, verified: verifiedTokens{entries: map[[sha256.Size]byte]verifiedToken{}},
		names: newClaimNames(append(slices.Clone(opts.RoleClaims), opts.EnvironmentsClaim)...)}
	for _, a := range opts.SigningAlgs {
		o.algs = append(o.algs, jose.SignatureAlgorithm(a))
	}
	return o
}

// Discover reads the issuer's discovery document now (at start, to learn
// early that the issuer is misconfigured); verification retries it later
// if it fails.
func (o *OIDC) Discover(ctx context.Context) error {
	_, err := o.discovered(ctx)
	return err
}

// discovered reads the discovery document once. While one attempt runs, or
// within discoveryRetry of a failed one, callers get ErrIssuerUnavailable at
// once instead of queueing behind the network.
func (o *OIDC) discovered(ctx context.Context) (*discovered, error) {
	if d := o.current.Load(); d != nil {
		return d, nil
	}
	now := o.opts.Now()
	o.mu.Lock()
	if o.discovering || !o.lastDiscovery.IsZero() && now.Sub(o.lastDiscovery) < discoveryRetry {
		o.mu.Unlock()
		return nil, ErrIssuerUnavailable
	}
	o.discovering, o.lastDiscovery = true, now
	o.mu.Unlock()

	d, err := o.discover(ctx)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.discovering = false
	if err != nil {
		return nil, err
	}
	o.current.Store(d)
	return d, nil
}

// Reload reads the issuer's key set again now and forgets every verified
// token, so a key the issuer withdrew stops verifying at once (SIGHUP). The
// keys held stay in use if the issuer cannot be read.
func (o *OIDC) Reload(ctx context.Context) error {
	d, err := o.discovered(ctx)
	if err != nil {
		return err
	}
	err = d.keys.reload(ctx)
	o.verified.clear()
	return err
}

func (o *OIDC) discover(ctx context.Context) (*discovered, error) {
	dctx, cancel := context.WithTimeout(oidc.ClientContext(context.WithoutCancel(ctx), o.opts.HTTPClient), keyFetchTimeout)
	defer cancel()
	provider, err := oidc.NewProvider(dctx, o.opts.IssuerURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIssuerUnavailable, err)
	}
	var meta struct {
		JWKSURL string `json:"jwks_uri"`
	}
	if err := provider.Claims(&meta); err != nil || meta.JWKSURL == "" {
		return nil, fmt.Errorf("%w: the discovery document names no jwks_uri", ErrIssuerUnavailable)
	}
	keys := &keySet{url: meta.JWKSURL, client: o.opts.HTTPClient, algs: o.algs, cooldown: keyRefetchCooldown, now: o.opts.Now}
	return &discovered{keys: keys, verifier: oidc.NewVerifier(o.opts.IssuerURL, keys, &oidc.Config{
		ClientID:             o.opts.Audience,
		SupportedSigningAlgs: o.opts.SigningAlgs,
		// go-oidc's own lifetime check has a fixed five-minute leeway on
		// nbf; Verify checks exp, nbf and iat with the configured skew.
		SkipExpiryCheck: true,
	})}, nil
}

// Verify reads the token strictly (see claims.go), checks its signature,
// issuer, audience and algorithm with go-oidc, then its type, authorized
// party and lifetime, and maps its claims to a principal. A token verified
// in the last minute is answered from the cache of verified tokens.
func (o *OIDC) Verify(ctx context.Context, token string) (Principal, error) {
	now := o.opts.Now()
	sum := sha256.Sum256([]byte(token))
	if p, ok := o.verified.get(sum, now); ok {
		return p, nil
	}
	header, payload, err := compactParts(token)
	if err != nil {
		return Principal{}, err
	}
	if err := readHeader(header); err != nil {
		return Principal{}, err
	}
	claims, err := strictObject(payload, o.names)
	if err != nil {
		return Principal{}, fmt.Errorf("the token's claims: %w", err)
	}
	d, err := o.discovered(ctx)
	if err != nil {
		return Principal{}, err
	}
	if _, err := d.verifier.Verify(ctx, token); err != nil {
		// go-oidc flattens the key set's errors: ask it directly whether
		// the issuer's keys could not be had at all.
		if d.keys.unavailable() {
			return Principal{}, fmt.Errorf("%w: its key set cannot be read", ErrIssuerUnavailable)
		}
		return Principal{}, err
	}
	expiry, err := o.checkClaims(claims, now)
	if err != nil {
		return Principal{}, err
	}
	p := o.principal(claims)
	until := now.Add(verifiedTTL)
	if expiry = expiry.Add(o.opts.ClockSkew); expiry.Before(until) {
		until = expiry
	}
	o.verified.put(sum, p, until, now)
	return p, nil
}

// checkClaims holds the token to what the gateway accepts: an access token
// (typ Bearer, as Keycloak's are, when it says), from an authorized party
// when a list of them is configured, with a subject, and a lifetime of
// JSON-number dates — exp and iat required, nbf optional — that has begun,
// has not ended (both within the skew) and is no longer than the maximum.
// It returns the expiry.
func (o *OIDC) checkClaims(claims map[string]any, now time.Time) (time.Time, error) {
	if typ, ok := claims["typ"]; ok {
		if s, _ := typ.(string); !strings.EqualFold(s, "Bearer") {
			return time.Time{}, errors.New("the token's typ is not Bearer: not an access token")
		}
	}
	if len(o.opts.AuthorizedParties) > 0 {
		if azp, _ := claims["azp"].(string); !slices.Contains(o.opts.AuthorizedParties, azp) {
			return time.Time{}, errors.New("the token's azp is not one of the authorized parties")
		}
	}
	if sub, _ := claims["sub"].(string); sub == "" {
		return time.Time{}, errors.New("the token has no subject")
	}
	exp, ok, err := numericDate(claims, "exp")
	switch {
	case err != nil:
		return time.Time{}, err
	case !ok:
		return time.Time{}, errors.New("the token has no expiry")
	case now.After(exp.Add(o.opts.ClockSkew)):
		return time.Time{}, errors.New("the token has expired")
	}
	iat, ok, err := numericDate(claims, "iat")
	switch {
	case err != nil:
		return time.Time{}, err
	case !ok:
		return time.Time{}, errors.New("the token has no iat (issue time)")
	case iat.After(now.Add(o.opts.ClockSkew)):
		return time.Time{}, errors.New("the token's iat is in the future")
	case o.opts.MaxLifetime > 0 && exp.Sub(iat) > o.opts.MaxLifetime:
		return time.Time{}, fmt.Errorf("the token lives %s, longer than the %s allowed", exp.Sub(iat), o.opts.MaxLifetime)
	}
	nbf, ok, err := numericDate(claims, "nbf")
	switch {
	case err != nil:
		return time.Time{}, err
	case ok && nbf.After(now.Add(o.opts.ClockSkew)):
		return time.Time{}, errors.New("the token's nbf is in the future")
	}
	return exp, nil
}

// principal maps verified claims to a principal: names cleaned and bounded
// (see CleanName), roles from the role claims, scope from the environments
// claim.
func (o *OIDC) principal(claims map[string]any) Principal {
	sub, _ := claims["sub"].(string)
	p := Principal{Subject: CleanName(sub), Method: MethodOIDC}
	if name, _ := claims["preferred_username"].(string); name != "" {
		p.Name = CleanName(name)
	} else {
		p.Name = p.Subject
	}
	for _, path := range o.opts.RoleClaims {
		for _, name := range roleNames(claims, path) {
			if r, ok := ParseRole(strings.TrimPrefix(name, o.opts.RolePrefix)); ok && strings.HasPrefix(name, o.opts.RolePrefix) && !slices.Contains(p.Roles, r) {
				p.Roles = append(p.Roles, r)
			}
		}
	}
	if o.opts.EnvironmentsClaim != "" {
		if ids, present := scopeClaim(claims, o.opts.EnvironmentsClaim); present {
			p.Environments = ids
		}
	}
	return p
}
