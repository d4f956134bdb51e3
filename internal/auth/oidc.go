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
	// ClockSkew is the tolerance on exp and nbf.
	ClockSkew time.Duration
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
	o := &OIDC{opts: opts, verified: verifiedTokens{entries: map[[sha256.Size]byte]verifiedToken{}}}
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

// Verify checks the token's signature, issuer, audience, algorithm and
// lifetime, and maps its claims to a principal. A token verified in the
// last minute is answered from the cache of verified tokens.
func (o *OIDC) Verify(ctx context.Context, token string) (Principal, error) {
	now := o.opts.Now()
	sum := sha256.Sum256([]byte(token))
	if p, ok := o.verified.get(sum, now); ok {
		return p, nil
	}
	d, err := o.discovered(ctx)
	if err != nil {
		return Principal{}, err
	}
	idt, err := d.verifier.Verify(ctx, token)
	if err != nil {
		// go-oidc flattens the key set's errors: ask it directly whether
		// the issuer's keys could not be had at all.
		if d.keys.unavailable() {
			return Principal{}, fmt.Errorf("%w: its key set cannot be read", ErrIssuerUnavailable)
		}
		return Principal{}, err
	}
	var all map[string]any
	if err := idt.Claims(&all); err != nil {
		return Principal{}, err
	}
	if err := o.checkLifetime(all, now); err != nil {
		return Principal{}, err
	}
	if idt.Subject == "" {
		return Principal{}, errors.New("the token has no subject")
	}
	p := Principal{Subject: idt.Subject, Method: MethodOIDC}
	if p.Name, _ = all["preferred_username"].(string); p.Name == "" {
		p.Name = p.Subject
	}
	for _, path := range o.opts.RoleClaims {
		v, _ := lookup(all, path)
		for _, name := range asStrings(v) {
			if r, ok := ParseRole(strings.TrimPrefix(name, o.opts.RolePrefix)); ok && strings.HasPrefix(name, o.opts.RolePrefix) && !slices.Contains(p.Roles, r) {
				p.Roles = append(p.Roles, r)
			}
		}
	}
	if o.opts.EnvironmentsClaim != "" {
		if raw, ok := lookup(all, o.opts.EnvironmentsClaim); ok {
			p.Environments = []string{}
			for _, id := range asStrings(raw) {
				if resourceIDMatch.MatchString(id) {
					p.Environments = append(p.Environments, id)
				}
			}
		}
	}
	until := now.Add(verifiedTTL)
	if expiry := idt.Expiry.Add(o.opts.ClockSkew); expiry.Before(until) {
		until = expiry
	}
	o.verified.put(sum, p, until, now)
	return p, nil
}

// checkLifetime holds exp (required), nbf and iat to now within the skew.
func (o *OIDC) checkLifetime(claims map[string]any, now time.Time) error {
	exp, ok := claims["exp"].(float64)
	if !ok {
		return errors.New("the token has no expiry")
	}
	if now.After(time.Unix(int64(exp), 0).Add(o.opts.ClockSkew)) {
		return errors.New("the token has expired")
	}
	for _, name := range []string{"nbf", "iat"} {
		if t, ok := claims[name].(float64); ok && time.Unix(int64(t), 0).After(now.Add(o.opts.ClockSkew)) {
			return fmt.Errorf("the token's %s is in the future", name)
		}
	}
	return nil
}

// lookup returns the value at a dotted path of claims, and whether it is
// there at all.
func lookup(doc map[string]any, path string) (any, bool) {
	var cur any = doc
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func asStrings(v any) []string {
	list, ok := v.([]any)
	if !ok {
		return nil
	}
	var out []string
	for _, item := range list {
		if s, ok := item.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
