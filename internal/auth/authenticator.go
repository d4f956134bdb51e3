package auth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Mode is how the API authenticates callers (SG_AUTH_MODE).
type Mode string

// The authentication modes.
const (
	ModeOIDC     Mode = "oidc"
	ModeStatic   Mode = "static"
	ModeDisabled Mode = "disabled"
)

// TokenVerifier turns a bearer token into a principal: OIDC or StaticTokens.
type TokenVerifier interface {
	Verify(ctx context.Context, token string) (Principal, error)
}

// ErrNoCredentials means the request carried no Authorization header and
// did not come from a trusted network.
var ErrNoCredentials = errors.New("no bearer token")

// InvalidError is a presented credential that was refused. Reason is for the
// gateway's log; clients are told only that the token was refused, so the
// answer cannot be used to probe tokens.
type InvalidError struct{ Reason error }

func (e *InvalidError) Error() string { return "invalid bearer token: " + e.Reason.Error() }
func (e *InvalidError) Unwrap() error { return e.Reason }

// Options configure an Authenticator.
type Options struct {
	Mode Mode
	// Tokens verifies bearer tokens (nil in ModeDisabled).
	Tokens TokenVerifier
	// TrustedNetworks admit DCM's service-provider-manager, which sends no
	// token yet: a request without Authorization whose TCP peer address is
	// inside them is the dcm role, and nothing more.
	TrustedNetworks []netip.Prefix
	// TrustedHosts are the host names (besides IP literals and localhost) a
	// trusted-network request may name in its Host header: a browser on a
	// trusted network that was DNS-rebound onto the gateway sends the
	// attacker's host name and gets nothing.
	TrustedHosts []string
}

// Authenticator identifies the caller of a request.
type Authenticator struct{ opts Options }

// New returns an Authenticator.
func New(opts Options) *Authenticator { return &Authenticator{opts: opts} }

// Mode is the configured mode.
func (a *Authenticator) Mode() Mode { return a.opts.Mode }

// Anonymous is the principal of every request when authentication is
// disabled: every role, every environment.
var Anonymous = Principal{Subject: "anonymous", Name: "anonymous (authentication disabled)", Roles: Roles, Method: MethodDisabled}

// trustedNetworkPrincipal is a DCM caller admitted by its address.
var trustedNetworkPrincipal = Principal{Subject: "dcm-trusted-network", Name: "DCM caller from a trusted network", Roles: []Role{RoleDCM}, Method: MethodTrustedNetwork}

// Authenticate identifies r's caller. It returns ErrNoCredentials without an
// Authorization header (unless the peer is trusted), *InvalidError for a
// refused credential, and ErrIssuerUnavailable when tokens cannot be checked
// right now. The peer address is the TCP connection's (r.RemoteAddr), never a
// forwarded header.
func (a *Authenticator) Authenticate(r *http.Request) (Principal, error) {
	if a.opts.Mode == ModeDisabled {
		return Anonymous, nil
	}
	if len(r.Header.Values("Authorization")) > 1 {
		// Which one counts would be up to each proxy on the way: none does.
		return Principal{}, &InvalidError{Reason: errors.New("more than one Authorization header")}
	}
	header := r.Header.Get("Authorization")
	if header == "" {
		if a.trusted(r) {
			return trustedNetworkPrincipal, nil
		}
		return Principal{}, ErrNoCredentials
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return Principal{}, &InvalidError{Reason: errors.New("the Authorization header is not `Bearer <token>`")}
	}
	p, err := a.opts.Tokens.Verify(r.Context(), token)
	switch {
	case errors.Is(err, ErrIssuerUnavailable):
		return Principal{}, err
	case err != nil:
		return Principal{}, &InvalidError{Reason: err}
	}
	return p, nil
}

func (a *Authenticator) trusted(r *http.Request) bool {
	if len(a.opts.TrustedNetworks) == 0 {
		return false
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := peer.Addr().Unmap()
	inside := false
	for _, n := range a.opts.TrustedNetworks {
		inside = inside || n.Contains(addr)
	}
	return inside && a.trustedHost(r.Host)
}

func (a *Authenticator) trustedHost(hostport string) bool {
	host, literal := HostName(hostport)
	return literal || slices.ContainsFunc(a.opts.TrustedHosts, func(h string) bool { return strings.EqualFold(h, host) })
}

// HostName is a Host header's name without its port, in lower case, and
// whether it is one no DNS-rebinding page can produce: an IP literal or
// localhost.
func HostName(hostport string) (name string, literal bool) {
	name = hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		name = h
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	_, err := netip.ParseAddr(strings.Trim(name, "[]"))
	return name, err == nil || name == "localhost"
}

// Describe says, for the start-up log, how callers are authenticated.
func (a *Authenticator) Describe() string {
	s := string(a.opts.Mode)
	if len(a.opts.TrustedNetworks) > 0 {
		s += fmt.Sprintf("; requests without a token from %v get the dcm role", a.opts.TrustedNetworks)
	}
	return s
}
