package dcm_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/dcm"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// environment stores the registered environment "east" directly (the registrar
// only reads the registry).
func environment(t *testing.T, reg *registrytest.Fixture) {
	const id = "east"
	t.Helper()
	if _, err := reg.DB.Exec(context.Background(), `INSERT INTO environments (id, namespace, server, auth_type, credentials_key_id, credentials, dcm)
		VALUES ($1, 'ns', 'https://cluster.example.com', 'token', 'k1', '\x00', '{"register": true, "provider_name": "storage-gateway-east"}')`, id); err != nil {
		t.Fatal(err)
	}
}

// registration is the DCM registration state of "east".
func registration(t *testing.T, reg *registrytest.Fixture) environments.DCMRegistration {
	const id = "east"
	t.Helper()
	env, err := reg.Registry.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return env.Status.DCMRegistration
}

// DCM answering 503 (with a Retry-After longer than any first backoff) and
// 429 is retried until it accepts, no sooner than DCM asked; a 4xx refusal
// is recorded and not retried.
func TestRegistrarRetriesWhatDCMMayAcceptLater(t *testing.T) {
	const retryAfter = 3 * time.Second // the first backoff is at most 1.5 s
	for _, tt := range []struct {
		name      string
		answers   []int
		wantState string
		wantCalls int32
	}{
		{"transient failures", []int{503, 429, 201}, dcm.StateRegistered, 3},
		{"refused", []int{400}, dcm.StateFailed, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := registrytest.New(t, registrytest.Options{})
			environment(t, reg)
			var calls atomic.Int32
			var mu sync.Mutex
			var at []time.Time
			srv := httptest.NewServer(dcmAPI(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				at = append(at, time.Now())
				mu.Unlock()
				n := int(calls.Add(1)) - 1
				code := tt.answers[min(n, len(tt.answers)-1)]
				w.Header().Set("Content-Type", "application/json")
				if code == 503 {
					w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
				}
				w.WriteHeader(code)
				_ = json.NewEncoder(w).Encode(map[string]any{"id": "provider-1", "name": "storage-gateway-east",
					"endpoint": "x", "service_type": "storage", "schema_version": "v1alpha1"})
			}))
			defer srv.Close()
			r, err := dcm.New(dcm.Options{URL: srv.URL, PublicURL: "https://gateway.example.com", Environments: reg.Registry, Owned: reg.Member(t, "replica-1"),
				Interval: time.Hour, Logger: slog.New(slog.DiscardHandler), Served: servedAll})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); r.Run(ctx) }()
			defer func() { cancel(); <-done }()

			poll.Until(t, 20*time.Second, "registration state "+tt.wantState, func() bool { return registration(t, reg).State == tt.wantState })
			time.Sleep(2 * time.Second) // nothing further is attempted
			if n := calls.Load(); n != tt.wantCalls {
				t.Fatalf("%d calls to DCM, want %d", n, tt.wantCalls)
			}
			if got := registration(t, reg); tt.wantState == dcm.StateRegistered && got.ProviderID != "provider-1" {
				t.Fatalf("registration %+v lacks the provider id", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if tt.answers[0] == 503 && at[1].Sub(at[0]) < retryAfter {
				t.Fatalf("retried %s after a 503 asking for %s", at[1].Sub(at[0]), retryAfter)
			}
		})
	}
}

// An environment deleted while its registration is in flight still leaves
// DCM: its row never learned the provider id DCM answered with, but the
// registrar did, and deregisters that provider.
func TestRegistrarDeregistersAProviderRegisteredWhileDeleted(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	environment(t, reg)
	creating, release := make(chan struct{}), make(chan struct{})
	deleted := make(chan string, 1)
	srv := httptest.NewServer(dcmAPI(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deleted <- r.URL.Path
			w.WriteHeader(http.StatusNoContent)
			return
		}
		close(creating)
		<-release
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "provider-in-flight", "name": "storage-gateway-east",
			"endpoint": "x", "service_type": "storage", "schema_version": "v1alpha1"})
	}))
	t.Cleanup(srv.Close)
	runRegistrar(t, dcm.Options{URL: srv.URL, PublicURL: "https://gateway.example.com", Environments: reg.Registry, Owned: reg.Member(t, "replica-1"),
		Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	<-creating
	if err := reg.Registry.Delete(t.Context(), "east", false); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case path := <-deleted:
		if path != "/providers/provider-in-flight" {
			t.Fatalf("deregistered %s, want /providers/provider-in-flight", path)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the provider registered while its environment was deleted stays in DCM")
	}
}

// dcmAPI is a DCM manager's API that knows no provider and no instance —
// the lookups a registration makes first — and hands everything else
// (registrations, deregistrations) to register.
func dcmAPI(register http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	empty := func(key string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{key: []any{}})
		}
	}
	mux.HandleFunc("GET /providers", empty("providers"))
	mux.HandleFunc("GET /service-type-instances", empty("instances"))
	mux.HandleFunc("GET /providers/{id}", func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) })
	mux.HandleFunc("/", register)
	return mux
}

// servedAll serves every instance: no take-over is held back.
func servedAll(_ context.Context, _ string, ids []string) (recorded, claimed map[string]bool, err error) {
	recorded = make(map[string]bool, len(ids))
	for _, id := range ids {
		recorded[id] = true
	}
	return recorded, nil, nil
}
