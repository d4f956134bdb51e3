package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
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

// ownerOnly are the operations that need the environment's cluster: only
// its owner, the one replica connected to it, serves them, and the other
// replicas forward them there. Every other operation is answered by any
// replica, from Postgres or from the fleet index every replica keeps.
var ownerOnly = map[string]bool{
	"createVolume": true, "listVolumes": true, "getVolumesHealth": true, "getVolume": true,
	"updateVolume": true, "deleteVolume": true, "verifyEnvironment": true, "updateEnvironment": true, "adoptVolumes": true,
	"takeOverDCMProvider": true,
}

// operation is what the contract says about one operation, plus the
// gateway's rules for it.
type operation struct {
	id string
	// ownerOnly: see the map of that name.
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
// handler, it audits mutations.
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
	o := operation{id: op.OperationID, open: len(*op.Security) == 0, mutating: method != http.MethodGet && method != http.MethodHead,
		ownerOnly: ownerOnly[op.OperationID]}
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
				Roles: principal.Roles, AuthMethod: principal.Method, Action: op.id,
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

// heldResponse keeps a handler's answer — status, headers, body — until it
// is released to the client or discarded for another answer.
type heldResponse struct {
	resp   *echo.Response
	writer http.ResponseWriter
	header http.Header
	status int
	body   bytes.Buffer
}

// hold makes resp write into a heldResponse until it is released.
func hold(resp *echo.Response) *heldResponse {
	h := &heldResponse{resp: resp, writer: resp.Writer, header: resp.Writer.Header().Clone()}
	resp.Writer = h
	return h
}

func (h *heldResponse) Header() http.Header { return h.header }

func (h *heldResponse) WriteHeader(code int) {
	if h.status == 0 {
		h.status = code
	}
}

func (h *heldResponse) Write(p []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return h.body.Write(p)
}

// release writes what was held, if anything, to the client.
func (h *heldResponse) release() error {
	h.resp.Writer = h.writer
	if h.status == 0 {
		return nil
	}
	maps.Copy(h.writer.Header(), h.header)
	h.writer.WriteHeader(h.status)
	_, err := h.writer.Write(h.body.Bytes())
	return err
}

// discard drops what was held, so the request can be answered anew.
func (h *heldResponse) discard() {
	h.resp.Writer = h.writer
	h.resp.Committed, h.resp.Status, h.resp.Size = false, 0, 0
}

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

// forward hands the request to env's owner on behalf of p and copies its
// answer; an error says nothing was written (no live owner: 503 with
// Retry-After).
func (g *guard) forward(c echo.Context, op operation, env string, p auth.Principal) error {
	req := c.Request()
	var body []byte
	if op.bodyLimit > 0 && req.Body != nil && req.Body != http.NoBody {
		// Read and bounded by validated already: this reads it from memory.
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return err
		}
	}
	return g.forwarding.Forward(c.Response(), req, env, forwarding.Envelope{
		Principal: p, Peer: req.RemoteAddr, RequestID: logging.RequestID(req.Context()),
	}, body)
}

// auditNote lets a handler name what an audited request created when the
// request did not (a volume created under an Idempotency-Key).
type auditNote struct{ volume string }

type auditNoteKey struct{}

// noteVolume records the volume a request created for its audit record.
func noteVolume(ctx context.Context, id string) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok {
		n.volume = id
	}
}

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

// validated checks the body's size and form, then the whole request against
// the contract, and runs the handler.
func (g *guard) validated(c echo.Context, op operation, route *routers.Route, params map[string]string, next echo.HandlerFunc) error {
	req := c.Request()
	if op.bodyLimit > 0 && req.Body != nil && req.Body != http.NoBody {
		body, err := readBody(req, op.bodyLimit)
		if err != nil {
			return err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	err := openapi3filter.ValidateRequest(req.Context(), &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	})
	if err != nil {
		return describeValidation(err)
	}
	return next(c)
}

// readBody reads at most limit bytes (413 beyond) and refuses what JSON
// decoders would accept but should not: a charset other than UTF-8, data
// after the JSON value, and nesting deeper than maxJSONDepth.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body must not exceed %d bytes", limit))
	}
	isJSON := false
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" {
		media, params, err := mime.ParseMediaType(ct)
		if err != nil {
			return nil, echo.NewHTTPError(http.StatusUnsupportedMediaType, "the Content-Type header cannot be parsed")
		}
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return nil, echo.NewHTTPError(http.StatusUnsupportedMediaType, "the body must be UTF-8 (charset=utf-8)")
		}
		isJSON = media == "application/json" || strings.HasSuffix(media, "+json")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, echo.NewHTTPError(http.StatusBadRequest, "the body could not be read")
	}
	if int64(len(body)) > limit {
		return nil, echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body must not exceed %d bytes", limit))
	}
	if !isJSON {
		return body, nil // the contract refuses the media type (415)
	}
	return body, checkJSON(body)
}

// checkJSON walks the body's tokens: one value, nested at most
// maxJSONDepth deep, and nothing after it but white space. An empty body is
// left to the contract (a required body is reported missing).
func checkJSON(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // 1e400 is valid JSON, if not a float64
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fault.Invalid("body", "is not valid JSON")
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > maxJSONDepth {
				return fault.Invalid("body", "is nested more than %d levels deep", maxJSONDepth)
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 && dec.More() {
			return fault.Invalid("body", "has data after the JSON value")
		}
	}
}

// statusOf is the status the request is answered with: the handler's, or
// the one its error maps to.
func statusOf(c echo.Context, err error) int {
	if err == nil {
		return c.Response().Status
	}
	return toProblem(err).Status
}

func joinRoles(roles []auth.Role) string {
	if len(roles) == 0 {
		return "no role"
	}
	return strings.Join(auth.RoleNames(roles), ", ")
}

// principal is the request's authenticated caller; every handler behind a
// role has one (the guard put it there).
func principal(ctx context.Context) auth.Principal {
	p, _ := auth.FromContext(ctx)
	return p
}
