package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcm-project/storage-gateway/internal/api"
)

func newServer(t *testing.T, checks ...api.Check) *echo.Echo {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	e := api.New(api.Options{
		Logger:           logger,
		Metrics:          prometheus.NewRegistry(),
		Readiness:        checks,
		ReadinessTimeout: 200 * time.Millisecond,
		Auth:             testAuth(t),
		Audit:            testAudit(nil, logger),
	})
	return e
}

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	h.ServeHTTP(rec, req)
	return rec
}

func ok(context.Context) error { return nil }

func TestHealthz(t *testing.T) {
	rec := get(t, newServer(t, api.Check{Name: "db", Check: func(context.Context) error { return errors.New("down") }}), "/healthz")
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"status":"ok"}` {
		t.Fatalf("healthz must not depend on checks: %d %s", rec.Code, rec.Body)
	}
}

func TestReadyzReportsEveryCheck(t *testing.T) {
	hang := func(ctx context.Context) error { <-ctx.Done(); return errors.New("timed out") }
	cases := []struct {
		name   string
		checks []api.Check
		code   int
		failed []string
	}{
		{"all pass", []api.Check{{Name: "postgres", Check: ok}, {Name: "nats", Check: ok}}, 200, nil},
		{"one fails", []api.Check{{Name: "postgres", Check: ok}, {Name: "nats", Check: func(context.Context) error { return errors.New("not connected") }}}, 503, []string{"nats"}},
		{"hanging check is bounded", []api.Check{{Name: "migrations", Check: hang}, {Name: "postgres", Check: ok}}, 503, []string{"migrations"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			rec := get(t, newServer(t, tc.checks...), "/readyz")
			if time.Since(start) > 2*time.Second {
				t.Fatalf("readyz took %s", time.Since(start))
			}
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
			var body api.Readiness
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if len(body.Checks) != len(tc.checks) {
				t.Fatalf("got %d check results, want %d", len(body.Checks), len(tc.checks))
			}
			var failed []string
			for i, c := range body.Checks {
				if c.Name != tc.checks[i].Name {
					t.Errorf("result %d is %q, want %q (order kept)", i, c.Name, tc.checks[i].Name)
				}
				if !c.Ok {
					failed = append(failed, c.Name)
					if c.Message == nil || *c.Message == "" {
						t.Errorf("failed check %s has no message", c.Name)
					}
				}
			}
			if strings.Join(failed, ",") != strings.Join(tc.failed, ",") {
				t.Fatalf("failed checks %v, want %v", failed, tc.failed)
			}
			wantStatus := api.Ready
			if tc.code != 200 {
				wantStatus = api.NotReady
			}
			if body.Status != wantStatus {
				t.Fatalf("status %q, want %q", body.Status, wantStatus)
			}
			// /metrics says the same as storage_gateway_ready.
			metrics := get(t, newServer(t, tc.checks...), "/metrics").Body.String()
			want := "storage_gateway_ready 1\n"
			if tc.code != 200 {
				want = "storage_gateway_ready 0\n"
			}
			if !strings.Contains(metrics, want) {
				t.Fatalf("/metrics does not say %q", want)
			}
		})
	}
}

func TestUnknownRouteIsProblemJSON(t *testing.T) {
	rec := get(t, newServer(t), "/api/v1alpha1/nope")
	if rec.Code != http.StatusNotFound {
		t.Fatalf("status %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q", ct)
	}
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != api.NOTFOUND || p.Status != 404 || p.Title == "" || p.Instance == nil || *p.Instance != "/api/v1alpha1/nope" {
		t.Fatalf("problem %+v", p)
	}
	if rec.Header().Get("X-Request-Id") == "" {
		t.Fatal("no request id on the error response")
	}
}

func TestPanicsBecomeOpaqueInternalProblems(t *testing.T) {
	e := newServer(t)
	e.GET("/boom", func(echo.Context) error { panic("database password is hunter2") })
	rec := get(t, e, "/boom")
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d", rec.Code)
	}
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != api.INTERNAL || p.Detail == nil || *p.Detail != "an unexpected error occurred" {
		t.Fatalf("problem %+v", p)
	}
	if strings.Contains(rec.Body.String(), "hunter2") {
		t.Fatal("internal error leaked to the client")
	}
}

func TestMetricsCountRequestsWithBoundedLabels(t *testing.T) {
	e := newServer(t)
	get(t, e, "/healthz")
	for _, p := range []string{"/a", "/b", "/c"} {
		get(t, e, p)
	}
	rec := get(t, e, "/metrics")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	body := rec.Body.String()
	if !strings.Contains(body, `storage_gateway_http_requests_total{code="200",host="",method="GET",url="/healthz"} 1`) {
		t.Fatalf("request counter missing:\n%s", body)
	}
	// Unmatched paths share one series instead of one per path.
	if !strings.Contains(body, `storage_gateway_http_requests_total{code="404",host="",method="GET",url=""} 3`) ||
		strings.Contains(body, `url="/a"`) {
		t.Fatalf("404s not collapsed into one series:\n%s", body)
	}
}

func TestServesItsOwnContract(t *testing.T) {
	rec := get(t, newServer(t), "/api/v1alpha1/openapi.yaml")
	want, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK || rec.Body.String() != string(want) {
		t.Fatalf("status %d; body differs from openapi.yaml", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/yaml" {
		t.Fatalf("content type %q", ct)
	}
}
