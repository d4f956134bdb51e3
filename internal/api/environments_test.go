package api_test

import (
	"bytes"
	"context"
	"encoding/json"

	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig/kubeconfigtest"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// cluster is a real harness cluster shared by the package's tests.
var cluster *harness.Cluster

func TestMain(m *testing.M) {
	os.Exit(harness.RunWithLocalClusters(m, 1, func(c []*harness.Cluster) { cluster = c[0] }))
}

// registryServer serves the API over a fresh registry.
func registryServer(t *testing.T) (*echo.Echo, *registrytest.Fixture) {
	t.Helper()
	reg := registrytest.New(t, registrytest.Options{})
	return api.New(api.Options{Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: reg.Registry,
		Auth: testAuth(t), Audit: testAudit(reg.DB, reg.Logger), AdminWriteRate: 1000, AdminWriteBurst: 1000}), reg
}

// call sends one request and returns the recorder; body may be nil, a string
// (sent as is) or a value (sent as JSON).
func call(t *testing.T, h http.Handler, method, path, contentType string, body any) *httptest.ResponseRecorder {
	t.Helper()
	var r *bytes.Reader
	switch b := body.(type) {
	case nil:
		r = bytes.NewReader(nil)
	case string:
		r = bytes.NewReader([]byte(b))
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req := httptest.NewRequest(method, path, r)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if contentType != "" {
		req.Header.Set(echo.HeaderContentType, contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// problem decodes a problem+json answer and checks its status, type and field.
func problem(t *testing.T, rec *httptest.ResponseRecorder, status int, typ api.ProblemType, field string) api.Problem {
	t.Helper()
	if rec.Code != status || rec.Header().Get(echo.HeaderContentType) != "application/problem+json" {
		t.Fatalf("status %d (%s), want %d problem+json: %s", rec.Code, rec.Header().Get(echo.HeaderContentType), status, rec.Body)
	}
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != typ || p.Status != status {
		t.Fatalf("problem = %+v, want %s/%d", p, typ, status)
	}
	if field != "" && (p.Field == nil || !strings.Contains(*p.Field, field)) {
		t.Fatalf("problem field = %v, want it to contain %q (%s)", p.Field, field, rec.Body)
	}
	return p
}

func gatewayKubeconfig(t *testing.T) string {
	t.Helper()
	kc, err := cluster.GatewayKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	return string(kc)
}

func TestEnvironmentLifecycleOverHTTP(t *testing.T) {
	h, reg := registryServer(t)
	input := map[string]any{
		"display_name": "East", "region": "local", "labels": map[string]string{"tier": "dev"},
		"allowed_namespaces": []string{"dcm-scratch"}, "kubeconfig": gatewayKubeconfig(t),
	}
	const base = "/api/v1alpha1/environments"

	rec := call(t, h, http.MethodPost, base+"?id=east", "application/json", input)
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var env api.Environment
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
		t.Fatal(err)
	}
	if env.Path != "environments/east" || env.Status.State != "READY" || env.Connection.AuthType != "token" || env.Namespace != "dcm-volumes" {
		t.Fatalf("created environment = %s", rec.Body)
	}
	for _, forbidden := range []string{cluster.GatewayToken(), `"kubeconfig":`, `"token":`, "BEGIN CERTIFICATE", kubeconfigtest.B64(cluster.CAData())} {
		if strings.Contains(rec.Body.String(), forbidden) {
			t.Fatalf("response holds secret material (%.20q)", forbidden)
		}
	}

	if rec := call(t, h, http.MethodPost, base+"?id=east", "application/json", input); rec.Code != http.StatusOK {
		t.Fatalf("identical replay: %d, want 200", rec.Code)
	}
	input["region"] = "elsewhere"
	problem(t, call(t, h, http.MethodPost, base+"?id=east", "application/json", input), http.StatusConflict, api.ALREADYEXISTS, "id")

	if rec := call(t, h, http.MethodGet, base+"/east", "", nil); rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), cluster.GatewayToken()) {
		t.Fatalf("get: %d", rec.Code)
	}
	rec = call(t, h, http.MethodGet, base+"?label_selector=tier%3Ddev&state=READY&region=local", "", nil)
	var list api.EnvironmentList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Environments) != 1 || list.NextPageToken != nil {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	rec = call(t, h, http.MethodGet, base+"?label_selector=tier%3Dprod", "", nil)
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Environments) != 0 {
		t.Fatalf("list with a non-matching selector: %s", rec.Body)
	}

	rec = call(t, h, http.MethodPatch, base+"/east", "application/merge-patch+json", `{"display_name":"East 2","labels":{"tier":null}}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"display_name":"East 2"`) || !strings.Contains(rec.Body.String(), `"labels":{}`) {
		t.Fatalf("patch: %d %s", rec.Code, rec.Body)
	}
	problem(t, call(t, h, http.MethodPatch, base+"/east", "application/merge-patch+json", `{"connection":{}}`), http.StatusBadRequest, api.INVALIDARGUMENT, "connection")
	problem(t, call(t, h, http.MethodPatch, base+"/east", "text/plain", `x`), http.StatusUnsupportedMediaType, api.UNSUPPORTEDMEDIATYPE, "")
	problem(t, call(t, h, http.MethodPut, base+"/east", "application/json", `{}`), http.StatusMethodNotAllowed, api.METHODNOTALLOWED, "")

	if rec := call(t, h, http.MethodPost, base+"/east:verify", "", nil); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"state":"READY"`) {
		t.Fatalf("verify: %d %s", rec.Code, rec.Body)
	}

	if _, err := reg.DB.Exec(context.Background(), `INSERT INTO volumes (environment_id, id, namespace, spec) VALUES ('east', 'v1', 'dcm-volumes', '{}')`); err != nil {
		t.Fatal(err)
	}
	problem(t, call(t, h, http.MethodDelete, base+"/east", "", nil), http.StatusConflict, api.FAILEDPRECONDITION, "")
	if rec := call(t, h, http.MethodDelete, base+"/east?force=true", "", nil); rec.Code != http.StatusNoContent {
		t.Fatalf("forced delete: %d %s", rec.Code, rec.Body)
	}
	problem(t, call(t, h, http.MethodGet, base+"/east", "", nil), http.StatusNotFound, api.NOTFOUND, "")
	problem(t, call(t, h, http.MethodPost, base+"/east:verify", "", nil), http.StatusNotFound, api.NOTFOUND, "")
	reg.AssertNoSecret(t, cluster.GatewayToken())
}

func TestCreateRejectsBadRequestsNamingTheField(t *testing.T) {
	h, reg := registryServer(t)
	canary := kubeconfigtest.NewCanary()
	valid := func(edit func(map[string]any)) map[string]any {
		in := map[string]any{"credentials": map[string]any{"server": cluster.ServerURL(), "token": canary}, "namespace": "dcm-volumes"}
		edit(in)
		return in
	}
	tests := []struct {
		name, query string
		body        any
		status      int
		typ         api.ProblemType
		field       string
	}{
		{"id missing", "", valid(func(map[string]any) {}), 400, api.INVALIDARGUMENT, "id"},
		{"id invalid", "?id=Bad_Id", valid(func(map[string]any) {}), 400, api.INVALIDARGUMENT, "id"},
		{"unknown field", "?id=x", valid(func(in map[string]any) { in["namspace"] = "typo" }), 400, api.INVALIDARGUMENT, ""},
		{"token pasted as a key", "?id=x", valid(func(in map[string]any) { in[canary+".more"] = 1 }), 400, api.INVALIDARGUMENT, ""},
		{"wrong type", "?id=x", valid(func(in map[string]any) { in["labels"] = []string{"a"} }), 400, api.INVALIDARGUMENT, "labels"},
		{"bad access mode", "?id=x", valid(func(in map[string]any) { in["defaults"] = map[string]any{"access_mode": "Sometimes"} }), 400, api.INVALIDARGUMENT, "defaults.access_mode"},
		{"unknown credentials field", "?id=x", valid(func(in map[string]any) { in["credentials"].(map[string]any)["password"] = canary }), 400, api.INVALIDARGUMENT, "credentials"},
		{"plain http server", "?id=x", valid(func(in map[string]any) { in["credentials"].(map[string]any)["server"] = "http://127.0.0.1:1" }), 400, api.INVALIDARGUMENT, "credentials.server"},
		{"both kinds of credentials", "?id=x", valid(func(in map[string]any) { in["kubeconfig"] = "apiVersion: v1" }), 400, api.INVALIDARGUMENT, "kubeconfig"},
		{"not JSON", "?id=x", "{", 400, api.INVALIDARGUMENT, ""},
		{"kubeconfig over 64 KiB", "?id=x", map[string]any{"kubeconfig": strings.Repeat("#", 70000)}, 400, api.INVALIDARGUMENT, "kubeconfig"},
		{"probe fails", "?id=x", valid(func(map[string]any) {}), 422, api.FAILEDPRECONDITION, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := call(t, h, http.MethodPost, "/api/v1alpha1/environments"+tt.query, "application/json", tt.body)
			p := problem(t, rec, tt.status, tt.typ, tt.field)
			if strings.Contains(rec.Body.String(), canary) {
				t.Fatalf("problem echoes the token: %s", rec.Body)
			}
			if p.Detail == nil || *p.Detail == "" {
				t.Fatal("problem without detail")
			}
		})
	}
	rec := call(t, h, http.MethodPost, "/api/v1alpha1/environments?id=x", "application/json", valid(func(in map[string]any) { in["namspace"] = "typo" }))
	if p := problem(t, rec, http.StatusBadRequest, api.INVALIDARGUMENT, "namspace"); *p.Detail != "namspace: is not a known field" {
		t.Fatalf("an unknown field should be named: %s", rec.Body)
	}
	if rows := reg.DumpTable(t, "environments"); rows != "" {
		t.Fatal("a bad request stored an environment")
	}
	reg.AssertNoSecret(t, canary)
}
