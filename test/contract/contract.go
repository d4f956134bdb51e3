// Package contract checks, in tests, that every response the gateway gives
// matches the OpenAPI contract (internal/api/openapi.yaml): declared status
// codes, content types and bodies. (Requests are validated by the server
// itself.) It must never be imported by production code.
package contract

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// Validating wraps h so that each response to a route of the contract is
// validated against it; mismatches fail t. Requests outside the contract
// (such as /metrics) pass unchecked.
func Validating(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	_, router := Load(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		check(t, router, r, body, rec)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// Load is the contract as written and a router over it that matches on
// paths alone, whatever Host a request names.
func Load(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	spec, err := api.Contract()
	if err != nil {
		t.Fatal(err)
	}
	spec.Servers = nil
	router, err := gorillamux.NewRouter(spec)
	if err != nil {
		t.Fatal(err)
	}
	return spec, router
}

func check(t testing.TB, router routers.Router, r *http.Request, body []byte, rec *httptest.ResponseRecorder) {
	probe := r.Clone(context.Background())
	probe.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := router.FindRoute(probe)
	if err != nil {
		return // not a contract route
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: probe, PathParams: params, Route: route,
			Options: &openapi3filter.Options{ExcludeRequestBody: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  rec.Code,
		Header:  rec.Header(),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	input.SetBodyBytes(rec.Body.Bytes())
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		t.Errorf("%s %s -> %d does not match the contract: %v\nbody: %s", r.Method, r.URL.Path, rec.Code, err, rec.Body.String())
	}
}
