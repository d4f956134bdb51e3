package auth

import (
	"context"
	"slices"

	"github.com/dcm-project/storage-gateway/internal/logging"
)

// Role is what a principal may do. Operations name the roles they admit in
// the OpenAPI contract's security requirements.
type Role string

// The gateway's roles (deploy/README.md, Roles).
const (
	// RoleAdmin manages environments, keys, tokens and reads the audit trail;
	// every operation admits it.
	RoleAdmin Role = "admin"
	// RoleDCM calls the per-environment volume endpoints (DCM's manager).
	RoleDCM Role = "dcm"
	// RoleViewer reads fleet views, environments and volumes (dashboards).
	RoleViewer Role = "viewer"
)

// Roles lists every role, in the order they are documented.
var Roles = []Role{RoleAdmin, RoleDCM, RoleViewer}

// RoleNames is roles as plain strings, for logs and listings.
func RoleNames(roles []Role) []string {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	return names
}

// ParseRole returns the role named s, if it is one.
func ParseRole(s string) (Role, bool) {
	r := Role(s)
	return r, slices.Contains(Roles, r)
}

// Method is how a principal was authenticated (recorded in the audit trail).
type Method string

// The authentication methods.
const (
	MethodOIDC           Method = "oidc"
	MethodStatic         Method = "static"
	MethodTrustedNetwork Method = "trusted-network"
	MethodDisabled       Method = "disabled"
	// MethodGateway records what the gateway did on its own (taking a DCM
	// provider name back), with no caller.
	MethodGateway Method = "gateway"
	// MethodAgentDispatch records a request DCM's control plane placed on
	// an environment's agent (over NATS, as the environment's agent).
	MethodAgentDispatch Method = "agent-dispatch"
)

// Principal is an authenticated caller.
type Principal struct {
	// Subject is the stable identity: the JWT `sub`, the static token's
	// subject, or a fixed name for trusted-network and disabled callers.
	Subject string
	// Name is for people: `preferred_username`, or the subject.
	Name  string
	Roles []Role
	// Environments limits the principal to these environment ids; nil means
	// every environment. Outside its scope an environment does not exist.
	Environments []string
	Method       Method
}

// HasAny reports whether the principal holds one of roles.
func (p Principal) HasAny(roles []Role) bool {
	for _, r := range p.Roles {
		if slices.Contains(roles, r) {
			return true
		}
	}
	return false
}

// Scoped reports whether the principal is limited to some environments.
func (p Principal) Scoped() bool { return p.Environments != nil }

// InScope reports whether the principal may see the environment.
func (p Principal) InScope(environmentID string) bool {
	return p.Environments == nil || slices.Contains(p.Environments, environmentID)
}

// Narrow limits a filter of environment ids to the principal's scope. An
// unscoped principal gets the filter back unchanged (nil: every
// environment). A scoped one gets its scope when the filter is empty, or the
// filter's ids inside its scope otherwise; the result is then never nil, so
// an empty intersection can never widen into "every environment".
func (p Principal) Narrow(filter []string) []string {
	if !p.Scoped() {
		return filter
	}
	if len(filter) == 0 {
		return slices.Clone(p.Environments)
	}
	out := []string{}
	for _, id := range filter {
		if p.InScope(id) {
			out = append(out, id)
		}
	}
	return out
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal the API authenticated for this request.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// maxNameLength bounds a principal's subject and name, in bytes.
const maxNameLength = 256

// CleanName is a subject or name from a token as the gateway keeps it:
// control, format and bidirectional characters as spaces, invalid UTF-8
// replaced, at most 256 bytes. It is applied once, where the principal is
// built, so the log, the audit table (which refuses NUL), problem details
// and the CLI all show the same storable text.
func CleanName(s string) string { return logging.Clean(s, maxNameLength) }
