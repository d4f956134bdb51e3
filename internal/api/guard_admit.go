package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/fault"
)

// admit checks the principal's roles, its scope and, for admin writes, its
// rate limit.
func (g *guard) admit(c echo.Context, op operation, p auth.Principal, env string) error {
	if !p.HasAny(op.roles) {
		return echo.NewHTTPError(http.StatusForbidden, fmt.Sprintf("%s needs one of the roles %s; %s has %s",
			op.id, joinRoles(op.roles), p.Subject, joinRoles(p.Roles)))
	}
	if env != "" && !p.InScope(env) {
		if op.id == "createEnvironment" {
			return echo.NewHTTPError(http.StatusForbidden, fmt.Sprintf("environment %q is outside the environments %s may use", env, p.Subject))
		}
		// The same answer as for an environment that does not exist.
		return fault.New(fault.NotFound, "environment %q not found", env)
	}
	if op.adminWrite {
		if wait, ok := g.limits.allow(p.Subject); !ok {
			c.Response().Header().Set("Retry-After", fmt.Sprint(int(wait.Seconds())+1))
			return echo.NewHTTPError(http.StatusTooManyRequests, "too many admin changes by "+p.Subject+"; retry after the time in Retry-After")
		}
	}
	return nil
}
