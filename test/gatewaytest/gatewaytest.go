// Package gatewaytest runs the gateway in-process for end-to-end tests: the
// HTTP API over a real registry (Postgres, key ring), a real cluster pool and
// the volume service, served on a local port with every response checked
// against the OpenAPI contract. It must never be imported by production code.
package gatewaytest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/dcm"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/events"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/internal/status"
	"github.com/dcm-project/storage-gateway/internal/volumes"
	"github.com/dcm-project/storage-gateway/test/contract"
	"github.com/dcm-project/storage-gateway/test/registrytest"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// Options adjust a Gateway.
type Options struct {
	// HealthUnhealthyCode defaults to 200.
	HealthUnhealthyCode int
	// NATSURL, when set, runs status reporting: follower, tracker, outbox
	// relay publishing to this server.
	NATSURL string
	// StatusDebounce defaults to the production 500ms.
	StatusDebounce time.Duration
	// ProvisioningTimeout defaults to the production 10m.
	ProvisioningTimeout time.Duration
	// DCMURL, when set, registers environments as providers with DCM's
	// service-provider-manager at this API base.
	DCMURL string
	// TrustedNetworks give requests without a token from these networks the
	// dcm role (DCM's service-provider-manager sends none).
	TrustedNetworks []netip.Prefix
}

// Gateway is a running in-process gateway. Its API authenticates static
// tokens; Tokens holds one per role.
type Gateway struct {
	URL      string
	Registry *registrytest.Registry
	Pool     *clusters.Pool
	Volumes  *volumes.Service
	Tokens   Tokens

	tokenFile string
	static    *auth.StaticTokens
	// tokens lists every bearer token issued (one per line), and seen holds
	// every answer and CloudEvent: at the end, no secret may be in either
	// or in the logs.
	tokens, seen *syncbuf.Buffer
}

// Tokens are bearer tokens of the gateway's token file, one per role.
type Tokens struct{ Admin, DCM, Viewer string }

// AddToken adds a token to the gateway's token file and loads it, as
// `tokens create` and a SIGHUP would; environments nil means unscoped.
func (g *Gateway) AddToken(t testing.TB, subject string, roles []auth.Role, environments []string) string {
	t.Helper()
	f, err := auth.ReadTokenFile(g.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := f.Add(subject, roles, environments, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(g.tokenFile); err != nil {
		t.Fatal(err)
	}
	if err := g.static.Reload(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(g.tokens, token)
	return token
}

// assertNoCanary fails the test if a bearer token the gateway accepts, or a
// cluster credential it stores, appears in its logs, in any answer it gave
// (headers included) or in any CloudEvent it published.
func (g *Gateway) assertNoCanary(t testing.TB) {
	t.Helper()
	secrets := append(strings.Fields(g.tokens.String()), g.Registry.StoredSecrets(t)...)
	for _, secret := range secrets {
		for where, text := range map[string]string{"log": g.Registry.Logs.String(), "answer or CloudEvent": g.seen.String()} {
			if strings.Contains(text, secret) {
				t.Errorf("a secret (a bearer token or stored cluster credential) appears in a %s", where)
			}
		}
	}
}

// watchEvents records every status CloudEvent published on the server.
func (g *Gateway) watchEvents(t testing.TB, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe("dcm.>", func(m *nats.Msg) { _, _ = g.seen.Write(m.Data) }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Drain() })
}

// recordingWriter copies an answer's headers and body to seen.
type recordingWriter struct {
	http.ResponseWriter
	seen *syncbuf.Buffer
}

func (w *recordingWriter) WriteHeader(code int) {
	for k, v := range w.Header() {
		fmt.Fprintf(w.seen, "%s: %s\n", k, strings.Join(v, ","))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	_, _ = w.seen.Write(p)
	return w.ResponseWriter.Write(p)
}

// Health checks run fast in tests so reachability changes show within
// seconds.
const (
	healthInterval = 500 * time.Millisecond
	healthTimeout  = time.Second
)

// Start runs a gateway until the test ends.
func Start(t testing.TB, opts Options) *Gateway {
	t.Helper()
	reg := registrytest.New(t, registrytest.Options{})
	g := &Gateway{Registry: reg, tokens: &syncbuf.Buffer{}, seen: &syncbuf.Buffer{}}
	// Registered first, so it runs last: after the gateway stopped, while
	// the database is still open.
	t.Cleanup(func() {
		g.assertNoCanary(t)
		if t.Failed() {
			t.Logf("gateway logs:\n%s", reg.Logs.String())
		}
	})
	if opts.NATSURL != "" {
		g.watchEvents(t, opts.NATSURL)
	}
	var registry *environments.Service
	var registrar *dcm.Registrar
	var feed *fleet.Feed
	limiters := clusters.NewLimiters(100, 200)
	pool := clusters.NewPool(clusters.PoolOptions{
		Client:         clusters.ClientOptions{Egress: registrytest.Loopback},
		Limiters:       limiters,
		SyncTimeout:    30 * time.Second,
		HealthInterval: healthInterval,
		HealthTimeout:  healthTimeout,
		Logger:         reg.Logger,
		OnHealth: func(id string, h clusters.Health) {
			registry.RecordHealth(id, h)
			feed.ClusterChanged(id)
			if registrar != nil && h.State == clusters.StateReady {
				registrar.Changed()
			}
		},
		OnStorage: func(id string) { feed.ClusterChanged(id) },
	})
	// The server starts first: DCM registration needs its URL.
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(&recordingWriter{ResponseWriter: w, seen: g.seen}, r)
	}))
	t.Cleanup(srv.Close)
	hooks := registrytest.Options{Pool: pool, Limiters: limiters,
		Changed: func(string) {
			feed.RegistryChanged()
			if registrar != nil {
				registrar.Changed()
			}
		},
		Deleted: func(id string, r environments.DCMRegistration) {
			feed.RegistryChanged()
			if registrar != nil {
				registrar.Forget(id, r)
			}
		},
	}
	registry = reg.NewService(hooks)
	if opts.DCMURL != "" {
		registrar = startRegistrar(t, opts.DCMURL, srv.URL, registry, reg, pool)
	}
	t.Cleanup(pool.Close)
	index := fleet.NewIndex()
	feed = startFleet(t, index, pool, registry, reg)
	queued := startStatus(t, opts, reg, pool)
	vols := volumes.NewService(volumes.Options{DB: reg.Pool, Environments: registry, Pool: pool, Logger: reg.Logger, Queued: queued})
	if opts.HealthUnhealthyCode == 0 {
		opts.HealthUnhealthyCode = 200
	}
	g.URL, g.Pool, g.Volumes = srv.URL, pool, vols
	g.startTokens(t)
	handler = contract.Validating(t, api.New(api.Options{
		Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: registry, Volumes: vols, Fleet: index,
		StartTime: time.Now(), HealthUnhealthyCode: opts.HealthUnhealthyCode,
		Auth:  auth.New(auth.Options{Mode: auth.ModeStatic, Tokens: g.static, TrustedNetworks: opts.TrustedNetworks}),
		Audit: auth.NewAuditLog(reg.Pool, reg.Logger, 24*time.Hour),
		// Tests change the registry faster than any admin; the limit has its own test.
		AdminWriteRate: 1000, AdminWriteBurst: 1000,
	}))
	return g
}

// startTokens writes a token file with one token per role and loads it.
func (g *Gateway) startTokens(t testing.TB) {
	t.Helper()
	g.tokenFile = filepath.Join(t.TempDir(), "tokens.json")
	var f auth.TokenFile
	for _, one := range []struct {
		role auth.Role
		dst  *string
	}{{auth.RoleAdmin, &g.Tokens.Admin}, {auth.RoleDCM, &g.Tokens.DCM}, {auth.RoleViewer, &g.Tokens.Viewer}} {
		token, _, err := f.Add("test-"+string(one.role), []auth.Role{one.role}, nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		*one.dst = token
		fmt.Fprintln(g.tokens, token)
	}
	if err := f.Write(g.tokenFile); err != nil {
		t.Fatal(err)
	}
	static, err := auth.NewStaticTokens(g.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	g.static = static
}

// followInterval is short in tests so new environments are followed at once.
const followInterval = 200 * time.Millisecond

// startStatus runs status reporting when opts ask for it and returns the
// relay's wake-up (nil otherwise). Shutdown mirrors serve: stop the
// follower and relay, flush the tracker, drain the outbox.
func startStatus(t testing.TB, opts Options, reg *registrytest.Registry, pool *clusters.Pool) func() {
	t.Helper()
	if opts.NATSURL == "" {
		return nil
	}
	if opts.StatusDebounce == 0 {
		opts.StatusDebounce = 500 * time.Millisecond
	}
	if opts.ProvisioningTimeout == 0 {
		opts.ProvisioningTimeout = 10 * time.Minute
	}
	nc, err := events.ConnectNATS(events.NATSOptions{URL: opts.NATSURL}, reg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := events.NewRelay(reg.Pool, nc.Conn, prometheus.NewRegistry(), reg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	tracker := status.NewTracker(status.Recorder{DB: reg.Pool, Queued: relay.Notify}, opts.StatusDebounce, reg.Logger)
	follower := &status.Follower{Tracker: tracker, Pool: pool, ProvisioningTimeout: opts.ProvisioningTimeout, Logger: reg.Logger}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { follower.Run(ctx, followInterval) })
	wg.Go(func() { relay.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		tracker.Close()
		drainCtx, cancelDrain := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelDrain()
		_ = relay.Drain(drainCtx)
		nc.Close(drainCtx)
	})
	return relay.Notify
}

// startFleet loads and runs the fleet index's feed until the test ends.
func startFleet(t testing.TB, index *fleet.Index, pool *clusters.Pool, registry *environments.Service, reg *registrytest.Registry) *fleet.Feed {
	t.Helper()
	feed := fleet.NewFeed(fleet.FeedOptions{Index: index, Pool: pool, Registry: registry, Store: fleet.Store{DB: reg.Pool}, Logger: reg.Logger})
	if err := feed.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, feed.Run)
	return feed
}

// startRegistrar runs DCM registration until the test ends.
func startRegistrar(t testing.TB, dcmURL, publicURL string, registry *environments.Service, reg *registrytest.Registry, pool *clusters.Pool) *dcm.Registrar {
	t.Helper()
	registrar, err := dcm.New(dcm.Options{URL: dcmURL, PublicURL: publicURL, Environments: registry, Interval: time.Minute,
		Logger: reg.Logger, TotalStorage: pool.TotalStorage})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, registrar.Run)
	return registrar
}

// runUntilCleanup runs a background worker until the test ends and waits
// for it to return.
func runUntilCleanup(t testing.TB, run func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
