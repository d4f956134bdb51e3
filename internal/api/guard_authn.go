package api

import (
	"errors"
	"net"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/forwarding"
)

// authenticate identifies the caller: from a forwarding envelope another
// replica signed (forwarded is then the envelope), or from the request's
// credentials. peer is the caller's address as the first replica saw it.
func (g *guard) authenticate(req *http.Request) (p auth.Principal, peer string, forwarded *forwarding.Envelope, err error) {
	if g.forwarding != nil {
		e, ok, err := g.forwarding.Verify(req)
		switch {
		case ok && err != nil:
			g.log.WarnContext(req.Context(), "forwarded request refused", "error", err, "peer", req.RemoteAddr)
			return auth.Principal{}, "", nil, &auth.InvalidError{Reason: err}
		case ok:
			return e.Principal, e.Peer, &e, nil
		}
	}
	p, err = g.auth.Authenticate(req)
	return p, req.RemoteAddr, nil, err
}

// refuse answers a request whose caller could not be authenticated: 503
// while tokens cannot be checked, 401 otherwise. A refused token (never the
// token) and a refused mutation, whose caller is unknown and so not stored
// in the audit table, are logged — at a bounded rate per peer, so
// anonymous floods cannot fill the log either.
func (g *guard) refuse(c echo.Context, what string, mutating bool, err error) error {
	ctx, peer := c.Request().Context(), c.Request().RemoteAddr
	if errors.Is(err, auth.ErrIssuerUnavailable) {
		g.log.WarnContext(ctx, "bearer token not verified: the identity provider cannot be reached", "error", err)
		c.Response().Header().Set("Retry-After", "5")
		return echo.NewHTTPError(http.StatusServiceUnavailable, "the identity provider cannot be reached; try again later")
	}
	realm := `Bearer realm="storage-gateway"`
	detail := what + " needs a bearer token (Authorization: Bearer <token>)"
	var invalid *auth.InvalidError
	logged := g.refusals.allowNow("peer " + peerIP(peer))
	if errors.As(err, &invalid) {
		realm += `, error="invalid_token"`
		detail = "the bearer token was not accepted"
		if logged {
			g.log.InfoContext(ctx, "bearer token refused", "operation", what, "reason", invalid.Reason.Error(), "peer", peer)
		}
	}
	if mutating && logged {
		g.log.WarnContext(ctx, "unauthenticated change refused", "audit", true, "action", what, "status", http.StatusUnauthorized, "peer", peer)
	}
	c.Response().Header().Set("WWW-Authenticate", realm)
	return echo.NewHTTPError(http.StatusUnauthorized, detail)
}

// metrics serves Prometheus metrics, behind the admin or viewer role when
// the operator asks for it (refusals as for any operation).
func (g *guard) metrics(serve echo.HandlerFunc, requireAuth bool) echo.HandlerFunc {
	if !requireAuth {
		return serve
	}
	allowed := []auth.Role{auth.RoleAdmin, auth.RoleViewer}
	return func(c echo.Context) error {
		p, err := g.auth.Authenticate(c.Request())
		if err != nil {
			return g.refuse(c, "/metrics", false, err)
		}
		if !p.HasAny(allowed) {
			return echo.NewHTTPError(http.StatusForbidden, "/metrics needs one of the roles "+joinRoles(allowed))
		}
		return serve(c)
	}
}

// peerIP is the address part of a TCP peer.
func peerIP(peer string) string {
	if host, _, err := net.SplitHostPort(peer); err == nil {
		return host
	}
	return peer
}
