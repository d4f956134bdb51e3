package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/forwarding"
	"github.com/dcm-project/storage-gateway/internal/logging"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/secrets"
	"github.com/dcm-project/storage-gateway/test/registrytest"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// The contract is the one place roles are declared: every operation states
// its security (an open one, `[]`), and every refusal the guard can give is a
// declared answer of the operation.
func TestEveryOperationDeclaresItsSecurityAndRefusals(t *testing.T) {
	spec, err := api.Contract()
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if op.Security == nil {
				t.Errorf("%s %s (%s) declares no security: add `security:` (roles, or [] for an open endpoint)", method, path, op.OperationID)
				continue
			}
			need := []string{"400"}
			var roles []string
			for _, req := range *op.Security {
				for name := range req {
					roles = append(roles, name)
					if _, ok := auth.ParseRole(name); !ok {
						t.Errorf("%s names %s, which is not a role", op.OperationID, name)
					}
				}
			}
			if len(roles) > 0 {
				need = append(need, "401", "403", "503")
				if strings.Contains(path, "{environment_id}") {
					need = append(need, "404")
				}
				if method != http.MethodGet && fmt.Sprint(roles) == "[admin]" {
					need = append(need, "429")
				}
				if op.RequestBody != nil {
					need = append(need, "413", "415")
				}
			}
			for _, code := range need {
				if op.Responses.Value(code) == nil {
					t.Errorf("%s does not declare the %s it can answer", op.OperationID, code)
				}
			}
		}
	}
	// Owner-only operations act on one environment's cluster.
	owners := 0
	for path, item := range spec.Paths.Map() {
		for _, op := range item.Operations() {
			v, marked := op.Extensions["x-owner-only"]
			if !marked {
				continue
			}
			owners++
			if v != true || !strings.Contains(path, "{environment_id}") {
				t.Errorf("%s: x-owner-only is %v on %s; it must be true, on a path of one environment", op.OperationID, v, path)
			}
		}
	}
	if owners == 0 {
		t.Error("no operation is x-owner-only: nothing would be forwarded to the environment's owner")
	}
	for _, name := range []string{"admin", "dcm", "viewer"} {
		if s, ok := spec.Components.SecuritySchemes[name]; !ok || s.Value.Type != "http" || s.Value.Scheme != "bearer" {
			t.Errorf("role %s has no bearer security scheme", name)
		}
	}
}

// send makes one request to h as the admin and returns the recorder.
func send(h http.Handler, method, path, contentType, body string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Bodies are bounded per operation and must be one UTF-8 JSON value of
// bounded depth; each refusal is a problem and changes nothing.
func TestRequestBodiesAreBoundedAndWellFormed(t *testing.T) {
	h, reg := registryServer(t)
	create := "/api/v1alpha1/environments?id=east"
	deep := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	for name, tc := range map[string]struct {
		contentType, body string
		status            int
		mention           string
	}{
		"too large":               {"application/json", `{"description":"` + strings.Repeat("x", 600<<10) + `"}`, 413, "524288"},
		"too deep":                {"application/json", `{"labels":` + deep + `}`, 400, "nested"},
		"two values":              {"application/json", `{"namespace":"a"} {"namespace":"b"}`, 400, "after the JSON value"},
		"trailing garbage":        {"application/json", `{"namespace":"a"}garbage`, 400, "body"},
		"UTF-16":                  {"application/json; charset=utf-16", `{"namespace":"a"}`, 415, "UTF-8"},
		"unparsable content type": {"application/json; charset", `{}`, 415, "Content-Type"},
		// Valid JSON, if no float64: the contract, not the parser, refuses it.
		"huge number": {"application/json", `{"description": 1e400}`, 400, "description"},
	} {
		t.Run(name, func(t *testing.T) {
			rec := send(h, http.MethodPost, create, tc.contentType, tc.body)
			if rec.Code != tc.status || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/problem+json") ||
				!strings.Contains(rec.Body.String(), tc.mention) {
				t.Fatalf("%d %s, want %d mentioning %q", rec.Code, rec.Body, tc.status, tc.mention)
			}
		})
	}
	// A volume body has a smaller bound than an environment's.
	rec := send(h, http.MethodPost, "/api/v1alpha1/environments/east/volumes?id=v", "application/json",
		`{"spec":{"service_type":"storage","capacity":"1Gi","metadata":{"name":"`+strings.Repeat("x", 70<<10)+`"}}}`)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 70 KiB volume body: %d %s", rec.Code, rec.Body)
	}
	var n int
	if err := reg.DB.QueryRow(t.Context(), `SELECT count(*) FROM environments`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d environments after refused requests (%v)", n, err)
	}
}

// A client-supplied field name is repeated back only if it is plain; PATCH
// follows the same rule as POST.
func TestUnknownFieldsAreNamedOnlyWhenPlain(t *testing.T) {
	h, _ := registryServer(t)
	kc, _ := json.Marshal(map[string]any{"kubeconfig": gatewayKubeconfig(t)})
	if rec := send(h, http.MethodPost, "/api/v1alpha1/environments?id=east", "application/json", string(kc)); rec.Code != http.StatusCreated {
		t.Fatalf("register: %d %s", rec.Code, rec.Body)
	}
	secretish := "sgw_" + strings.Repeat("Zq9", 16)
	for _, tc := range []struct{ method, path, ct string }{
		{http.MethodPost, "/api/v1alpha1/environments?id=west", "application/json"},
		{http.MethodPatch, "/api/v1alpha1/environments/east", "application/merge-patch+json"},
	} {
		rec := send(h, tc.method, tc.path, tc.ct, `{"colour":"red"}`)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "colour") {
			t.Errorf("%s a plain unknown field: %d %s", tc.method, rec.Code, rec.Body)
		}
		rec = send(h, tc.method, tc.path, tc.ct, `{"`+secretish+`":"red"}`)
		if rec.Code != http.StatusBadRequest || strings.Contains(rec.Body.String(), secretish) {
			t.Errorf("%s a secret-looking unknown field was echoed: %d %s", tc.method, rec.Code, rec.Body)
		}
	}
}

// Each principal has its own bucket of admin writes; beyond it the answer is
// 429 with Retry-After, and reads are never limited.
func TestAdminWritesAreRateLimitedPerPrincipal(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	const otherToken = "sgw_api-test-other-admin"
	h := api.New(api.Options{Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: reg.Registry,
		Auth: testAuth(t, staticToken(otherToken, "other-admin", auth.RoleAdmin)), Audit: testAudit(reg.DB, reg.Logger),
		AdminWriteRate: 0.5, AdminWriteBurst: 3})
	invalid := `{"namespace":"Not A Namespace"}`
	for i := range 3 {
		if rec := send(h, http.MethodPost, "/api/v1alpha1/environments?id=east", "application/json", invalid); rec.Code != http.StatusBadRequest {
			t.Fatalf("write %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := send(h, http.MethodPost, "/api/v1alpha1/environments?id=east", "application/json", invalid)
	retry, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
	if rec.Code != http.StatusTooManyRequests || retry < 1 || retry > 3 {
		t.Fatalf("write over the burst: %d (Retry-After %q) %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if rec := send(h, http.MethodGet, "/api/v1alpha1/environments", "", ""); rec.Code != http.StatusOK {
		t.Fatalf("a read while writes are limited: %d", rec.Code)
	}
	other := send(h, http.MethodPost, "/api/v1alpha1/environments?id=east", "application/json", invalid, "Authorization", "Bearer "+otherToken)
	if other.Code != http.StatusBadRequest {
		t.Fatalf("another admin is limited by the first one's writes: %d %s", other.Code, other.Body)
	}
	// The refusal is audited.
	page, err := testAudit(reg.DB, reg.Logger).List(t.Context(), auth.AuditQuery{Subject: "api-test"})
	if err != nil || len(page.Events) != 4 || page.Events[0].Status != http.StatusTooManyRequests {
		t.Fatalf("audit of the limited writes: %+v %v", page.Events, err)
	}
}

// Request ids: a plain one from the client is kept, anything else replaced;
// the id is answered and on every log line of the request.
func TestRequestIDsAreAnsweredAndLogged(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	var logs syncbuf.Buffer
	logger := logging.New(&logs, slog.LevelDebug)
	h := api.New(api.Options{Logger: logger, Metrics: prometheus.NewRegistry(),
		Environments: reg.Registry, Auth: testAuth(t), Audit: testAudit(reg.DB, logger)})
	rec := send(h, http.MethodDelete, "/api/v1alpha1/environments/nowhere", "", "", "X-Request-Id", "trace-42.a:b")
	if rec.Header().Get("X-Request-Id") != "trace-42.a:b" || rec.Code != http.StatusNotFound {
		t.Fatalf("kept id: %q %d", rec.Header().Get("X-Request-Id"), rec.Code)
	}
	lines := 0
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("a log line is not JSON: %s", line)
		}
		if entry["request_id"] != "trace-42.a:b" {
			t.Errorf("a line of the request lacks its id: %s", line)
		}
		lines++
	}
	if lines < 2 { // the audit line and the access log line at least
		t.Fatalf("%d log lines:\n%s", lines, logs.String())
	}
	for _, bad := range []string{"has spaces", strings.Repeat("a", 200), "new\nline"} {
		rec := send(h, http.MethodGet, "/healthz", "", "", "X-Request-Id", bad)
		if got := rec.Header().Get("X-Request-Id"); got == bad || len(got) != 36 {
			t.Errorf("id %q answered as %q, want a fresh UUID", bad, got)
		}
	}
}

func TestSecurityHeadersAndHostNames(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	newServer := func(a *auth.Authenticator, hosts ...string) http.Handler {
		return api.New(api.Options{Logger: logger, Metrics: prometheus.NewRegistry(), Auth: a, Audit: testAudit(nil, logger), AllowedHosts: hosts})
	}
	get := func(h http.Handler, host string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := get(newServer(testAuth(t)), "gateway.example.com")
	for header, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
		"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'"} {
		if got := rec.Header().Get(header); got != want {
			t.Errorf("%s: %q, want %q", header, got, want)
		}
	}
	listed := newServer(testAuth(t), "gateway.example.com")
	disabled := newServer(auth.New(auth.Options{Mode: auth.ModeDisabled}))
	for _, tc := range []struct {
		name string
		h    http.Handler
		host string
		want int
	}{
		{"listed name", listed, "gateway.example.com:8080", 200},
		{"listed name, other case", listed, "Gateway.Example.COM", 200},
		{"unlisted name", listed, "attacker.example.net", 400},
		{"IP literal", listed, "10.0.0.7:8080", 200},
		{"IPv6 literal", listed, "[fd00::7]:8080", 200},
		{"localhost", listed, "localhost:8080", 200},
		{"any name with auth on and no list", newServer(testAuth(t)), "anything.example", 200},
		{"a name with auth off and no list", disabled, "rebound.example.net", 400},
		{"loopback with auth off", disabled, "127.0.0.1:8080", 200},
	} {
		if rec := get(tc.h, tc.host); rec.Code != tc.want {
			t.Errorf("%s: Host %s answered %d, want %d", tc.name, tc.host, rec.Code, tc.want)
		}
	}
}

// /readyz says which check failed to anyone, but why (it can name the
// database host and user) only to an authenticated caller; it always says
// how callers are authenticated.
func TestReadyzExplainsFailuresOnlyToAuthenticatedCallers(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	h := api.New(api.Options{Logger: logger, Metrics: prometheus.NewRegistry(), Auth: testAuth(t), Audit: testAudit(nil, logger),
		Readiness: []api.Check{{Name: "postgres", Check: func(context.Context) error {
			return errors.New("connect to database postgres@db.internal:5432/storage_gateway: refused")
		}}}})
	anonymous := httptest.NewRecorder()
	h.ServeHTTP(anonymous, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	authenticated := send(h, http.MethodGet, "/readyz", "", "")
	for _, rec := range []*httptest.ResponseRecorder{anonymous, authenticated} {
		var body api.Readiness
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 503 || body.AuthMode != api.ReadinessAuthModeStatic ||
			len(body.Checks) != 1 || body.Checks[0].Ok || body.Checks[0].Name != "postgres" {
			t.Fatalf("readyz: %d %s", rec.Code, rec.Body)
		}
	}
	if bytes.Contains(anonymous.Body.Bytes(), []byte("db.internal")) {
		t.Fatalf("an anonymous caller learns the database address: %s", anonymous.Body)
	}
	if !bytes.Contains(authenticated.Body.Bytes(), []byte("db.internal")) {
		t.Fatalf("an authenticated caller is not told why: %s", authenticated.Body)
	}
	// With authentication disabled nobody has shown a credential.
	disabled := api.New(api.Options{Logger: logger, Metrics: prometheus.NewRegistry(), Auth: auth.New(auth.Options{Mode: auth.ModeDisabled}),
		Audit: testAudit(nil, logger), Readiness: []api.Check{{Name: "postgres", Check: func(context.Context) error {
			return errors.New("connect to database postgres@db.internal:5432/storage_gateway: refused")
		}}}})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	req.Host = "127.0.0.1"
	disabled.ServeHTTP(rec, req)
	if rec.Code != 503 || bytes.Contains(rec.Body.Bytes(), []byte("db.internal")) || !bytes.Contains(rec.Body.Bytes(), []byte(`"auth_mode":"disabled"`)) {
		t.Fatalf("readyz with authentication disabled: %d %s", rec.Code, rec.Body)
	}
}

// A principal's refused requests are audited at a bounded rate, so refusals
// cannot grow the audit table at line rate; its admitted ones always are.
func TestRefusalsAreAuditedAtABoundedRate(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	const viewer = "sgw_api-test-viewer"
	h := api.New(api.Options{Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: reg.Registry,
		Auth: testAuth(t, staticToken(viewer, "viewer", auth.RoleViewer)), Audit: testAudit(reg.DB, reg.Logger)})
	for range 50 {
		if rec := send(h, http.MethodDelete, "/api/v1alpha1/environments/east", "", "", "Authorization", "Bearer "+viewer); rec.Code != http.StatusForbidden {
			t.Fatalf("a viewer's delete: %d", rec.Code)
		}
	}
	page, err := testAudit(reg.DB, reg.Logger).List(t.Context(), auth.AuditQuery{Subject: "viewer", MaxPageSize: 100})
	if err != nil || len(page.Events) < 20 || len(page.Events) > 22 {
		t.Fatalf("%d refusals of 50 audited (%v), want the burst of 20 (and at most a couple more)", len(page.Events), err)
	}
	if page.Events[0].Status != http.StatusForbidden || page.Events[0].Action != "deleteEnvironment" {
		t.Fatalf("event %+v", page.Events[0])
	}
	// Reading the audit trail is an admin action, audited too.
	send(h, http.MethodGet, "/api/v1alpha1/audit-events", "", "")
	page, err = testAudit(reg.DB, reg.Logger).List(t.Context(), auth.AuditQuery{Action: "listAuditEvents"})
	if err != nil || len(page.Events) != 1 || page.Events[0].Subject != "api-test" || page.Events[0].Status != http.StatusOK {
		t.Fatalf("reading the audit trail: %+v %v", page.Events, err)
	}
}

// /metrics is open unless the operator puts it behind the admin or viewer
// role.
func TestMetricsCanRequireARole(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	const dcmToken, viewerToken = "sgw_api-test-dcm", "sgw_api-test-viewer"
	a := testAuth(t, staticToken(dcmToken, "dcm", auth.RoleDCM), staticToken(viewerToken, "viewer", auth.RoleViewer))
	for _, tc := range []struct {
		require bool
		token   string
		want    int
	}{
		{false, "", 200},
		{true, "", 401},
		{true, dcmToken, 403},
		{true, viewerToken, 200},
		{true, adminToken, 200},
	} {
		h := api.New(api.Options{Logger: logger, Metrics: prometheus.NewRegistry(), Auth: a, Audit: testAudit(nil, logger), MetricsRequireAuth: tc.require})
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("require=%v token=%q: %d, want %d", tc.require, tc.token, rec.Code, tc.want)
		}
	}
}

// Every contract violation names the JSON path of the offending field and
// what was expected — also inside the two request shapes of a volume.
func TestContractViolationsNameTheFieldAndTheExpectation(t *testing.T) {
	h, _ := registryServer(t)
	volumes := "/api/v1alpha1/environments/east/volumes"
	for name, tc := range map[string]struct {
		path, body   string
		field, cause string
	}{
		"misspelled field":      {volumes + "?id=v1", `{"spec":{"service_type":"storage","capcity":"1Gi","metadata":{"name":"a"}}}`, "spec.capcity", "is not a known field"},
		"missing capacity":      {volumes + "?id=v1", `{"spec":{"service_type":"storage","metadata":{"name":"a"}}}`, "spec.capacity", "is required"},
		"wrong service type":    {volumes + "?id=v1", `{"spec":{"service_type":"compute","capacity":"1Gi","metadata":{"name":"a"}}}`, "spec.service_type", `must be one of "storage"`},
		"unknown hint":          {volumes + "?id=v1", `{"spec":{"service_type":"storage","capacity":"1Gi","metadata":{"name":"a"},"provider_hints":{"kubernetes":{"colour":"red"}}}}`, "spec.provider_hints.kubernetes.colour", "is not a known field"},
		"bad access mode":       {volumes + "?id=v1", `{"spec":{"service_type":"storage","capacity":"1Gi","metadata":{"name":"a"},"provider_hints":{"kubernetes":{"access_mode":"RWX"}}}}`, "spec.provider_hints.kubernetes.access_mode", `must be one of "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"`},
		"bad name":              {volumes + "?id=v1", `{"spec":{"service_type":"storage","capacity":"1Gi","metadata":{"name":"Not A Name"}}}`, "spec.metadata.name", "must be 1-63 lowercase letters, digits or '-'"},
		"bad capacity":          {volumes + "?id=v1", `{"spec":{"service_type":"storage","capacity":"10gb","metadata":{"name":"a"}}}`, "spec.capacity", "must be a size: digits, an optional fraction and an optional unit"},
		"the contract's K":      {volumes + "?id=v1", `{"spec":{"service_type":"storage","capacity":"1K","metadata":{"name":"a"}}}`, "spec.capacity", "must be a size"},
		"bad id":                {volumes + "?id=Not_OK", `{"spec":{"service_type":"storage","capacity":"1Gi","metadata":{"name":"a"}}}`, "id", "must be 1-63 lowercase letters"},
		"agent shape, bad type": {volumes, `{"service_type":"compute","capacity":"1Gi","metadata":{"name":"a"}}`, "service_type", `must be one of "storage"`},
		"array parameter item":  {"/api/v1alpha1/storage-classes?environment=ok&environment=Not_OK", "", "environment[1]", "must be 1-63 lowercase letters"},
		"bad audit action":      {"/api/v1alpha1/audit-events?action=create-volume", "", "action", "must be an operation id"},
		"query enum":            {"/api/v1alpha1/environments?state=BROKEN", "", "state", "must be one of"},
	} {
		t.Run(name, func(t *testing.T) {
			method := http.MethodPost
			if tc.body == "" {
				method = http.MethodGet
			}
			rec := send(h, method, tc.path, "application/json", tc.body, "Idempotency-Key", "k1")
			var p api.Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusBadRequest {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if p.Field == nil || *p.Field != tc.field || p.Detail == nil || !strings.Contains(*p.Detail, tc.cause) {
				t.Fatalf("problem %s, want field %s and %q", rec.Body, tc.field, tc.cause)
			}
		})
	}
}

// countingVerifier counts the tokens it is asked to verify.
type countingVerifier struct {
	auth.TokenVerifier
	calls atomic.Int32
}

func (v *countingVerifier) Verify(ctx context.Context, token string) (auth.Principal, error) {
	v.calls.Add(1)
	return v.TokenVerifier.Verify(ctx, token)
}

// Open endpoints never spend a verification on a token sent to them (an
// identity provider round trip, or a token flood, costs nothing there);
// /readyz verifies one, since it explains failures only to token holders.
func TestOpenEndpointsDoNotVerifyTokens(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	verifier := &countingVerifier{TokenVerifier: testTokens(t)}
	h := api.New(api.Options{Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: reg.Registry,
		Auth: auth.New(auth.Options{Mode: auth.ModeStatic, Tokens: verifier}), Audit: testAudit(reg.DB, reg.Logger)})
	for _, path := range []string{"/healthz", "/metrics", "/api/v1alpha1/openapi.yaml"} {
		if rec := send(h, http.MethodGet, path, "", ""); rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
	if n := verifier.calls.Load(); n != 0 {
		t.Fatalf("open endpoints verified %d tokens, want none", n)
	}
	send(h, http.MethodGet, "/readyz", "", "")
	if n := verifier.calls.Load(); n != 1 {
		t.Fatalf("/readyz verified %d tokens, want 1", n)
	}
}

// An environment's provider health is read by DCM, admins and viewers in
// scope; to anyone else an environment that exists, one out of its scope
// and one that does not exist answer alike (but for the id itself).
func TestProviderHealthNeedsARoleAndTheScope(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	reg.InsertEnvironment(t, "east")
	reg.InsertEnvironment(t, "west")
	const westViewer, westDCM = "sgw_api-test-west-viewer", "sgw_api-test-west-dcm"
	viewer, dcm := staticToken(westViewer, "west-viewer", auth.RoleViewer), staticToken(westDCM, "west-dcm", auth.RoleDCM)
	viewer.Environments, dcm.Environments = []string{"west"}, []string{"west"}
	h := api.New(api.Options{Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: reg.Registry,
		Auth: testAuth(t, viewer, dcm), Audit: testAudit(reg.DB, reg.Logger)})
	answer := func(id string, headers ...string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "/api/v1alpha1/environments/"+id+"/volumes/health", nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, strings.ReplaceAll(rec.Body.String(), id, "ID")
	}
	for _, tt := range []struct {
		name    string
		headers []string
		want    int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"a refused token", []string{"Authorization", "Bearer sgw_not-a-token"}, http.StatusUnauthorized},
		{"another's viewer", []string{"Authorization", "Bearer " + westViewer}, http.StatusNotFound},
		{"another's DCM", []string{"Authorization", "Bearer " + westDCM}, http.StatusNotFound},
	} {
		code, body := answer("east", tt.headers...)
		if code != tt.want {
			t.Errorf("%s: health of an existing environment answered %d %s, want %d", tt.name, code, body, tt.want)
		}
		for _, other := range []string{"nowhere", "north-2"} {
			if c, b := answer(other, tt.headers...); c != code || b != body {
				t.Errorf("%s: east answers %d %s, %s answers %d %s", tt.name, code, body, other, c, b)
			}
		}
	}
}

// A change whose audit record cannot be stored is answered 503 with
// Retry-After, never as done; a refusal is answered as it was.
func TestAChangeIsNeverAnsweredDoneWithoutItsAuditRecord(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	reg.InsertEnvironment(t, "east")
	const viewer = "sgw_api-test-viewer"
	h := api.New(api.Options{Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: reg.Registry,
		Auth: testAuth(t, staticToken(viewer, "viewer", auth.RoleViewer)), Audit: testAudit(reg.DB, reg.Logger)})
	if _, err := reg.DB.Exec(t.Context(), `ALTER TABLE audit_events ADD CONSTRAINT refuse_all CHECK (false) NOT VALID`); err != nil {
		t.Fatal(err)
	}
	rec := send(h, http.MethodDelete, "/api/v1alpha1/environments/east", "", "")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
		!strings.Contains(rec.Body.String(), "audit record could not be stored") {
		t.Fatalf("a delete whose audit record failed: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	if rec := send(h, http.MethodDelete, "/api/v1alpha1/environments/east", "", "", "Authorization", "Bearer "+viewer); rec.Code != http.StatusForbidden {
		t.Fatalf("a viewer's delete while audit records fail: %d %s", rec.Code, rec.Body)
	}
	if _, err := reg.DB.Exec(t.Context(), `ALTER TABLE audit_events DROP CONSTRAINT refuse_all`); err != nil {
		t.Fatal(err)
	}
	// The retry finds the change made, and is recorded.
	if rec := send(h, http.MethodDelete, "/api/v1alpha1/environments/east", "", ""); rec.Code != http.StatusNotFound {
		t.Fatalf("the retried delete: %d %s", rec.Code, rec.Body)
	}
	page, err := testAudit(reg.DB, reg.Logger).List(t.Context(), auth.AuditQuery{Action: "deleteEnvironment"})
	if err != nil || len(page.Events) != 1 || page.Events[0].Status != http.StatusNotFound {
		t.Fatalf("audit records %+v %v, want the retry's", page.Events, err)
	}
}

// ownsAll owns every environment.
type ownsAll struct{}

func (ownsAll) Owns(string) bool { return true }

// fixedOwner says replica-1's process owns every environment, at url.
type fixedOwner struct {
	url         string
	incarnation uuid.UUID
}

func (o fixedOwner) Owner(context.Context, string) (membership.Peer, error) {
	return membership.Peer{ID: "replica-1", AdvertiseURL: o.url, Incarnation: o.incarnation}, nil
}

// A genuine forwarded request that reaches the owner after its time — the
// owner was frozen while the forwarding replica gave up — is answered 503
// with Retry-After, not 401, and is not logged as an unauthenticated change.
func TestAStaleForwardIsUnavailableNotUnauthenticated(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	reg.InsertEnvironment(t, "east")
	keys, err := secrets.NewKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	ring := func() *secrets.KeyRing { return keys }
	incarnation := uuid.New()
	owner := forwarding.New(forwarding.Options{Keys: ring, Member: "replica-1", Incarnation: incarnation, Logger: reg.Logger})
	h := api.New(api.Options{Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: reg.Registry,
		Auth: testAuth(t), Audit: testAudit(reg.DB, reg.Logger), Forwarding: owner, Owned: ownsAll{}})

	// What replica-2 sent a minute ago, as the owner reads it on waking.
	var late *http.Request
	wire := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		late = httptest.NewRequest(r.Method, r.URL.RequestURI(), nil)
		late.Header = r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer wire.Close()
	sender := forwarding.New(forwarding.Options{Owners: fixedOwner{wire.URL, incarnation}, Keys: ring, Member: "replica-2",
		Logger: reg.Logger, Now: func() time.Time { return time.Now().Add(-time.Minute) }})
	admin := auth.Principal{Subject: "api-test", Name: "api-test", Roles: []auth.Role{auth.RoleAdmin}, Method: auth.MethodStatic}
	if err := sender.Forward(httptest.NewRecorder(), httptest.NewRequest(http.MethodDelete, "/api/v1alpha1/environments/east", nil), "east",
		forwarding.Envelope{Principal: admin, RequestID: "req-late"}, nil); err != nil || late == nil {
		t.Fatalf("forward: %v", err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, late)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || rec.Header().Get("WWW-Authenticate") != "" {
		t.Fatalf("a stale forward: %d %v %s, want 503 with Retry-After", rec.Code, rec.Header(), rec.Body)
	}
	if strings.Contains(reg.Logs.String(), "unauthenticated change refused") {
		t.Fatal("a stale forward was logged as an unauthenticated change")
	}
	if _, err := reg.Registry.Get(t.Context(), "east"); err != nil {
		t.Fatalf("the stale forward changed something: %v", err)
	}
}

// A database that drops the gateway's connections — a restart, 57P01 —
// makes a request 503 with Retry-After, never 500, and the next one is
// served on a new connection.
func TestARestartingDatabaseIsUnavailableNotAnError(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	reg.InsertEnvironment(t, "east")
	h := api.New(api.Options{Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: reg.Registry,
		Auth: testAuth(t), Audit: testAudit(reg.DB, reg.Logger)})
	const path = "/api/v1alpha1/environments/east"
	if rec := send(h, http.MethodGet, path, "", ""); rec.Code != http.StatusOK {
		t.Fatalf("before: %d %s", rec.Code, rec.Body)
	}
	admin, err := pgx.Connect(t.Context(), reg.DB.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	var dropped int
	if err := admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&dropped); err != nil || dropped == 0 {
		t.Fatalf("terminated %d backends: %v", dropped, err)
	}
	rec := send(h, http.MethodGet, path, "", "")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("with its connection dropped: %d %v %s, want 503 with Retry-After", rec.Code, rec.Header(), rec.Body)
	}
	if rec := send(h, http.MethodGet, path, "", ""); rec.Code != http.StatusOK {
		t.Fatalf("after: %d %s", rec.Code, rec.Body)
	}
}
