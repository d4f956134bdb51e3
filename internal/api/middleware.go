package api

import (
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/logging"
)

// subjectKey is where the guard leaves the caller's subject for the access log.
const subjectKey = "storage-gateway/subject"

// requestIDPattern is what a client-supplied X-Request-Id must look like to
// be kept (and propagated); anything else is replaced by a new id, so
// clients cannot put arbitrary text into every log line of their request.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// requestID accepts or assigns the request's id, answers it in
// X-Request-Id, and puts it in the request's context so every log line of
// the request carries it.
func requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		id := req.Header.Get(echo.HeaderXRequestID)
		if !requestIDPattern.MatchString(id) {
			id = uuid.NewString()
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		c.SetRequest(req.WithContext(logging.WithRequestID(req.Context(), id)))
		return next(c)
	}
}

// securityHeaders tells browsers that these are API answers: never sniffed,
// framed, cached, scripted or sent on as a referrer.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if c.Request().TLS != nil {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		return next(c)
	}
}

// hostCheck refuses a Host header that is not one of the gateway's names:
// a browser that a DNS-rebinding page pointed at the gateway sends the
// attacker's host name. IP literals and localhost are always served (probes
// and local tools use them, and no rebinding can produce them). Without a
// list, any name is served while authentication is on (a rebound browser has
// no token), and only those while it is off.
func hostCheck(allowed []string, authDisabled bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			host, literal := auth.HostName(c.Request().Host)
			switch {
			case literal, host == "":
			case len(allowed) == 0 && !authDisabled:
			case slices.ContainsFunc(allowed, func(a string) bool { return strings.EqualFold(a, host) }):
			default:
				return fault.Invalid("Host", "is not a name this gateway serves (SG_ALLOWED_HOSTS)")
			}
			return next(c)
		}
	}
}
