package dcm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
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
				Interval: time.Hour, Logger: slog.New(slog.DiscardHandler), Served: servedAll, Repeat: repeatNone})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); r.Run(ctx) }()
			defer func() { cancel(); <-done }()

			poll.Until(t, 20*time.Second, "registration state "+tt.wantState, func() bool { return registration(t, reg).State == tt.wantState })
			poll.Never(t, 2*time.Second, "a further call to DCM", func() bool { return calls.Load() != tt.wantCalls })
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

// repeatNone repeats no volume's status (these tests create none).
func repeatNone(context.Context, string, string, string) (bool, error) { return false, nil }

// servedAll serves every instance: no take-over is held back.
func servedAll(_ context.Context, _ string, ids []string) (recorded, claimed map[string]bool, err error) {
	recorded = make(map[string]bool, len(ids))
	for _, id := range ids {
		recorded[id] = true
	}
	return recorded, nil, nil
}

// dcmSite is DCM's manager as far as the registrar talks to it: providers
// by id, a registration under an existing name updating that provider (as
// DCM's manager does), and instances of them.
type dcmSite struct {
	mu            sync.Mutex
	providers     map[string]map[string]any // id → provider
	instances     map[string][]string       // provider name → instance ids
	registrations int
}

func (d *dcmSite) handler() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /providers", func(w http.ResponseWriter, _ *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		list := []any{}
		for _, p := range d.providers {
			list = append(list, p)
		}
		reply(w, http.StatusOK, map[string]any{"providers": list})
	})
	mux.HandleFunc("GET /providers/{id}", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if p, ok := d.providers[r.PathValue("id")]; ok {
			reply(w, http.StatusOK, p)
			return
		}
		reply(w, http.StatusNotFound, map[string]any{"type": "NOT_FOUND"})
	})
	mux.HandleFunc("POST /providers", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		d.mu.Lock()
		defer d.mu.Unlock()
		d.registrations++
		for id, p := range d.providers {
			if p["name"] == body["name"] {
				body["id"] = id
				d.providers[id] = body
				reply(w, http.StatusOK, body)
				return
			}
		}
		body["id"] = fmt.Sprintf("p-%d", len(d.providers)+1)
		d.providers[body["id"].(string)] = body
		reply(w, http.StatusCreated, body)
	})
	mux.HandleFunc("GET /service-type-instances", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		name := r.URL.Query().Get("provider")
		list := []any{}
		for _, id := range d.instances[name] {
			list = append(list, map[string]any{"id": id, "provider_name": name, "spec": map[string]any{"metadata": map[string]any{"name": id}}})
		}
		reply(w, http.StatusOK, map[string]any{"instances": list})
	})
	return mux
}

// endpoint is where DCM's provider id points, and how many registrations
// it has taken.
func (d *dcmSite) endpoint(id string) (string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, _ := d.providers[id]["endpoint"].(string)
	return e, d.registrations
}

// A provider name another endpoint holds is taken over only when the
// environment serves every instance DCM holds under it: otherwise the
// registration is BLOCKED, naming what it does not serve, and DCM is not
// called to register — until an admin forces the take-over. A name the
// gateway held and another endpoint registered again is taken back at
// the next read-back, saying who held it.
func TestRegistrarTakesOverOnlyWhatItServes(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	if _, err := reg.DB.Exec(t.Context(), `INSERT INTO environments (id, namespace, server, auth_type, credentials_key_id, credentials, dcm)
		VALUES ('east', 'ns', 'https://cluster.example.com', 'token', 'k1', '\x00', '{"register": true, "provider_name": "sp-east"}')`); err != nil {
		t.Fatal(err)
	}
	const sp = "http://sp.example.com/api/v1alpha1/volumes"
	site := &dcmSite{providers: map[string]map[string]any{"p-1": {"id": "p-1", "name": "sp-east", "endpoint": sp,
		"service_type": "storage", "schema_version": "v1alpha1"}}, instances: map[string][]string{"sp-east": {"served", "orphan"}}}
	srv := httptest.NewServer(site.handler())
	t.Cleanup(srv.Close)
	owner := reg.Member(t, "replica-1")
	r := runRegistrar(t, dcm.Options{URL: srv.URL, PublicURL: "https://gateway.example.com", Environments: reg.Registry, Owned: owner,
		Interval: time.Hour, CheckInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Served: func(_ context.Context, _ string, ids []string) (map[string]bool, map[string]bool, error) {
			return map[string]bool{"served": true}, nil, nil
		}})

	poll.Until(t, 20*time.Second, "registration BLOCKED", func() bool { return registration(t, reg).State == dcm.StateBlocked })
	got := registration(t, reg)
	if got.InstancesWithoutClaim == nil || *got.InstancesWithoutClaim != 1 || !slices.Equal(got.InstancesWithoutClaimIDs, []string{"orphan"}) ||
		!strings.Contains(got.Message, "orphan") {
		t.Fatalf("blocked registration %+v", got)
	}
	if endpoint, n := site.endpoint("p-1"); endpoint != sp || n != 0 {
		t.Fatalf("DCM's provider points at %s after %d registrations: the take-over was not held back", endpoint, n)
	}

	env, err := reg.Registry.Get(t.Context(), "east")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(t.Context(), env, true); err != nil {
		t.Fatal(err)
	}
	ours := "https://gateway.example.com/api/v1alpha1/environments/east/volumes"
	if got := registration(t, reg); got.State != dcm.StateRegistered || got.ProviderID != "p-1" {
		t.Fatalf("after a forced take-over: %+v", got)
	}
	if endpoint, _ := site.endpoint("p-1"); endpoint != ours {
		t.Fatalf("DCM's provider points at %s after the forced take-over", endpoint)
	}

	// The provider registers its name again: the next read-back takes it back.
	site.mu.Lock()
	site.providers["p-1"]["endpoint"] = sp
	site.mu.Unlock()
	poll.Until(t, 20*time.Second, "the name taken back", func() bool {
		got := registration(t, reg)
		endpoint, _ := site.endpoint("p-1")
		return endpoint == ours && got.DisplacedBy == sp && got.ReclaimTime != nil && got.State == dcm.StateRegistered
	})
}

// Environments registered together share DCM's provider listing: ten new
// environments (none with a provider id yet, so each pass looks its name
// up in the listing) list DCM's providers about once, not ten times.
func TestRegistrationsShareDCMsProviderListing(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	const n = 10
	for i := range n {
		if _, err := reg.DB.Exec(t.Context(), `INSERT INTO environments (id, namespace, server, auth_type, credentials_key_id, credentials, dcm)
			VALUES ($1, 'ns', 'https://cluster.example.com', 'token', 'k1', '\x00', $2)`,
			fmt.Sprint("env-", i), fmt.Sprintf(`{"register": true, "provider_name": "sp-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	var listings, registrations atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /providers", func(w http.ResponseWriter, _ *http.Request) {
		listings.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"providers": []any{}})
	})
	mux.HandleFunc("GET /service-type-instances", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"instances": []any{}})
	})
	mux.HandleFunc("POST /providers", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		registrations.Add(1)
		body["id"] = fmt.Sprint("id-", body["name"])
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(body)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	owner := reg.Member(t, "replica-1")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("env-", i)
	}
	registrytest.Own(t, owner, ids...)
	runRegistrar(t, dcm.Options{URL: srv.URL, PublicURL: "https://gateway.example.com", Environments: reg.Registry, Owned: owner,
		Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	poll.Until(t, 20*time.Second, "all ten registered", func() bool { return registrations.Load() == n })
	if got := listings.Load(); got > 3 {
		t.Fatalf("%d registrations listed DCM's providers %d times; want them to share a listing", n, got)
	}
}
