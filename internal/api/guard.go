package api

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/forwarding"
	"github.com/dcm-project/storage-gateway/internal/logging"
	"github.com/dcm-project/storage-gateway/internal/membership"
)

// refusalRate and refusalBurst bound how many refused requests per second
// one principal or peer gets audited or logged.
const (
	refusalRate  = 1
	refusalBurst = 20
)

// Request body limits: an environment carries a kubeconfig of up to 64 KiB,
// JSON-escaped; every other body is a small JSON object. maxJSONDepth bounds
// nesting, so no body makes a decoder recurse deeply.
const (
	environmentBodyLimit = 512 << 10
	defaultBodyLimit     = 64 << 10
	maxJSONDepth         = 32
)

// ownerOnlyExtension marks, in the contract, the operations that need the
// environment's cluster: only its owner, the one replica connected to it,
// serves them, and the other replicas forward them there. Every other
// operation is answered by any replica, from Postgres or from the fleet
// index every replica keeps.
const ownerOnlyExtension = "x-owner-only"

// operation is what the contract says about one operation, plus the
// gateway's rules for it.
type operation struct {
	id string
	// ownerOnly: see ownerOnlyExtension.
	ownerOnly bool
	// roles admitted, from the operation's security requirements (one
	// scheme per role); open operations admit everyone.
	roles []auth.Role
	open  bool
	// mutating operations and admin-only ones are audited; admin-only
	// mutations are rate-limited per principal too.
	mutating, audited, adminWrite bool
	bodyLimit                     int64
}

// guard is the API's one request gate, driven by the OpenAPI contract: it
// finds the operation, authenticates the caller, checks the operation's
// roles and the principal's environment scope, limits admin writes, checks
// the body and validates the request against the contract; after the
// handler, it audits mutations. middleware, here, runs those steps in
// order; each job has a file of its own: guard_authn.go (who is calling),
// guard_admit.go (may they), guard_body.go (the body and the contract),
// guard_forward.go (to the environment's owner), guard_audit.go (the
// record, and the answer held until it is stored).
type guard struct {
	router routers.Router
	ops    map[*openapi3.Operation]operation
	auth   *auth.Authenticator
	audit  *auth.AuditLog
	limits *principalLimits
	// refusals bounds how often refused requests of one principal (or,
	// unauthenticated, one peer) are audited or logged.
	refusals *principalLimits
	log      *slog.Logger
	// forwarding and owned are nil in a gateway that forwards nothing
	// (tests of the API alone).
	forwarding *forwarding.Forwarder
	owned      interface{ Owns(env string) bool }
}

func newGuard(opts Options) *guard {
	spec, err := Contract()
	if err != nil {
		panic("api: embedded OpenAPI document is invalid: " + err.Error()) // a checked-in file, validated by tests
	}
	spec.Servers = nil // match on path only, whatever Host the client used
	router, err := gorillamux.NewRouter(spec)
	if err != nil {
		panic("api: embedded OpenAPI document has unroutable paths: " + err.Error())
	}
	g := &guard{router: router, ops: map[*openapi3.Operation]operation{}, auth: opts.Auth, audit: opts.Audit,
		limits:   newPrincipalLimits(opts.AdminWriteRate, opts.AdminWriteBurst),
		refusals: newPrincipalLimits(refusalRate, refusalBurst), log: opts.Logger,
		forwarding: opts.Forwarding, owned: opts.Owned}
	for _, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			g.ops[op] = describeOperation(method, op)
		}
	}
	return g
}

// describeOperation reads an operation's security requirements: each names
// one role's scheme; `security: []` makes it open. An operation without a
// declaration panics at start (a test walks them all, so it fails the build
// first).
func describeOperation(method string, op *openapi3.Operation) operation {
	if op.Security == nil {
		panic("api: operation " + op.OperationID + " declares no security requirement")
	}
	owner, _ := op.Extensions[ownerOnlyExtension].(bool)
	o := operation{id: op.OperationID, open: len(*op.Security) == 0, mutating: method != http.MethodGet && method != http.MethodHead,
		ownerOnly: owner}
	for _, req := range *op.Security {
		for name := range req {
			role, ok := auth.ParseRole(name)
			if !ok {
				panic("api: operation " + op.OperationID + " names an unknown role " + name)
			}
			o.roles = append(o.roles, role)
		}
	}
	adminOnly := slices.Equal(o.roles, []auth.Role{auth.RoleAdmin})
	o.audited = o.mutating || adminOnly
	o.adminWrite = o.mutating && adminOnly
	if op.RequestBody != nil {
		o.bodyLimit = defaultBodyLimit
		if op.OperationID == "createEnvironment" || op.OperationID == "updateEnvironment" {
			o.bodyLimit = environmentBodyLimit
		}
	}
	return o
}

func (g *guard) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		route, params, err := g.router.FindRoute(req)
		if err != nil {
			if !strings.HasPrefix(req.URL.Path, "/api/") {
				return next(c) // /metrics, and echo's own 404 for anything else
			}
			if errors.Is(err, routers.ErrMethodNotAllowed) {
				return echo.ErrMethodNotAllowed
			}
			return echo.ErrNotFound
		}
		op := g.ops[route.Operation]
		if op.open {
			// Of the open operations only /readyz asks who is calling (it
			// explains failed checks to authenticated callers); the others
			// never spend a verification on a token they do not need.
			if op.id == "getReadyz" {
				if p, err := g.auth.Authenticate(req); err == nil {
					c.SetRequest(req.WithContext(auth.WithPrincipal(req.Context(), p)))
				}
			}
			return g.validated(c, op, route, params, next)
		}
		principal, peer, forwarded, err := g.authenticate(req)
		if errors.Is(err, forwarding.ErrStale) {
			// Not a caller without credentials: a replica that forwarded in
			// time, and has answered its caller 503 already.
			return fault.RetryLater(time.Second, "the request reached the environment's owner too late; retry it")
		}
		if err != nil {
			return g.refuse(c, op.id, op.mutating, err)
		}
		c.Set(subjectKey, principal.Subject)
		env, vol := target(op, params, req)
		note := &auditNote{volume: vol}
		c.SetRequest(req.WithContext(context.WithValue(auth.WithPrincipal(req.Context(), principal), auditNoteKey{}, note)))
		admitErr := g.admit(c, op, principal, env)
		err = admitErr
		handled := false
		// An audited request's answer is held until its record is stored:
		// a change is never answered as done without it.
		var held *heldResponse
		if op.audited {
			held = hold(c.Response())
		}
		if err == nil {
			err = g.validated(c, op, route, params, func(c echo.Context) error {
				if !op.ownerOnly || g.owned == nil || g.owned.Owns(env) {
					return next(c)
				}
				if forwarded != nil {
					// Never a second hop: it moved again meanwhile.
					return membership.NotOwned(env, time.Second)
				}
				err := g.forward(c, op, env, principal)
				// The owner audits what it answered, unless it refused the
				// envelope (clocks apart, a key ring not reloaded yet).
				handled = err == nil && c.Response().Status != http.StatusUnauthorized
				return err
			})
		}
		// Refusals by one principal are stored at a bounded rate, so an
		// authenticated caller cannot grow the audit table at line rate
		// (the access log still shows every request). A request the owner
		// answered is audited there, under the original caller and peer.
		var stored error
		if op.audited && !handled && (admitErr == nil || g.refusals.allowNow(principal.Subject)) {
			stored = g.audit.Record(c.Request().Context(), auth.AuditEvent{
				RequestID: logging.RequestID(req.Context()), Subject: principal.Subject, Name: principal.Name,
				Roles: principal.Roles, AuthMethod: principal.Method, Action: cmp.Or(note.action, op.id),
				EnvironmentID: env, VolumeID: note.volume, Status: statusOf(c, err), Peer: peer,
			})
		}
		if held == nil {
			return err
		}
		if stored != nil && err == nil && c.Response().Status < http.StatusBadRequest {
			// Done, but not on record: the caller hears 503 and retries;
			// creates and deletes are idempotent, so the retry converges and
			// is recorded.
			held.discard()
			return fault.RetryLater(5*time.Second, "the change was made but its audit record could not be stored; retry the request")
		}
		return errors.Join(err, held.release())
	}
}

// target is the environment and volume an operation addresses: path
// parameters, or the client-chosen ids of the create operations.
func target(op operation, params map[string]string, r *http.Request) (env, vol string) {
	env, vol = params["environment_id"], params["volume_id"]
	switch op.id {
	case "createEnvironment":
		env = r.URL.Query().Get("id")
	case "createVolume":
		vol = r.URL.Query().Get("id")
	}
	return env, vol
}
