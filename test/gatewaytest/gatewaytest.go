// Package gatewaytest runs the gateway in-process for end-to-end tests: the
// production assembly (gateway.New and Run, every worker serve runs) on a
// fresh database, with a loopback listener whose every answer is checked
// against the OpenAPI contract, and static tokens, one per role. It must
// never be imported by production code.
package gatewaytest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/gateway"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/secrets"
	"github.com/dcm-project/storage-gateway/internal/volumes"
	"github.com/dcm-project/storage-gateway/test/contract"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/registrytest"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// Options are the named overrides of the production settings a test needs.
type Options struct {
	// HealthUnhealthyCode sets SG_HEALTH_UNHEALTHY_CODE.
	HealthUnhealthyCode int
	// NATSURL sets SG_NATS_URL; empty runs the embedded server, in-process
	// only.
	NATSURL string
	// StatusDebounce sets SG_STATUS_DEBOUNCE.
	StatusDebounce time.Duration
	// ProvisioningTimeout sets SG_PROVISIONING_TIMEOUT.
	ProvisioningTimeout time.Duration
	// DCMURL sets SG_DCM_REGISTRATION_URL: environments register as
	// providers with DCM's service-provider-manager at this API base.
	DCMURL string
	// TrustedNetworks sets SG_AUTH_DCM_TRUSTED_NETWORKS: requests without a
	// token from these networks get the dcm role (DCM's
	// service-provider-manager sends none).
	TrustedNetworks []netip.Prefix
	// ReconcileInterval sets how often the volume reconciler sweeps the
	// environments (default: production's).
	ReconcileInterval time.Duration
	// Settings override the test gateway's SG_* settings; an empty value
	// restores the production default (a benchmark measures production).
	Settings map[string]string
}

// settings are what every test gateway changes from production: harness
// clusters listen on loopback, and tests change the registry faster than
// any admin (the limit has its own tests).
var settings = map[string]string{
	"SG_ALLOWED_CLUSTER_CIDRS":     "127.0.0.0/8",
	"SG_EMBEDDED_NATS_LISTEN":      config.EmbeddedNATSListenOff,
	"SG_ADMIN_WRITE_RATE":          "1000",
	"SG_ADMIN_WRITE_BURST":         "1000",
	"SG_DCM_REGISTRATION_INTERVAL": "1m",
	"SG_SHUTDOWN_TIMEOUT":          "10s",
}

// intervals are short in tests so reachability changes and new
// environments show within a second.
var intervals = gateway.Intervals{Health: 500 * time.Millisecond, HealthTimeout: time.Second, Follow: 200 * time.Millisecond}

// Gateway is a running in-process gateway. Its API authenticates static
// tokens; Tokens holds one per role.
type Gateway struct {
	URL      string
	Tokens   Tokens
	DB       *pgxpool.Pool
	Clusters *clusters.Pool
	Volumes  *volumes.Service

	gateway   *gateway.Gateway
	tokenFile string
	// stored searches the database and the logs for secrets.
	stored *registrytest.Fixture
	// tokens lists every bearer token issued (one per line), and seen holds
	// every answer and CloudEvent: at the end, no secret may be in either
	// or in the logs.
	tokens, seen *syncbuf.Buffer
}

// Tokens are bearer tokens of the gateway's token file, one per role.
type Tokens struct{ Admin, DCM, Viewer string }

// Start runs a gateway until the test ends.
func Start(t testing.TB, opts Options) *Gateway {
	t.Helper()
	dir := t.TempDir()
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := &Gateway{tokens: &syncbuf.Buffer{}, seen: &syncbuf.Buffer{}, tokenFile: filepath.Join(dir, "tokens.json")}
	keys := newKeyRing(t, filepath.Join(dir, "keyring.json"))
	g.writeTokens(t)
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.URL = "http://" + ln.Addr().String()
	database := pgtest.NewMigratedDatabase(t)
	vars := map[string]string{
		"SG_DATABASE_URL":         database.URL,
		"SG_KEY_RING_FILE":        filepath.Join(dir, "keyring.json"),
		"SG_AUTH_TOKEN_FILE":      g.tokenFile,
		"SG_STATE_DIR":            dir,
		"SG_PUBLIC_URL":           g.URL,
		"SG_NATS_URL":             opts.NATSURL,
		"SG_DCM_REGISTRATION_URL": opts.DCMURL,
	}
	for k, v := range settings {
		vars[k] = v
	}
	optional := map[string]string{"SG_HEALTH_UNHEALTHY_CODE": strconv.Itoa(opts.HealthUnhealthyCode),
		"SG_STATUS_DEBOUNCE": opts.StatusDebounce.String(), "SG_PROVISIONING_TIMEOUT": opts.ProvisioningTimeout.String()}
	for k, v := range optional {
		if v != "0" && v != "0s" {
			vars[k] = v
		}
	}
	var networks []string
	for _, n := range opts.TrustedNetworks {
		networks = append(networks, n.String())
	}
	vars["SG_AUTH_DCM_TRUSTED_NETWORKS"] = strings.Join(networks, ",")
	for k, v := range opts.Settings {
		if v == "" {
			delete(vars, k)
		} else {
			vars[k] = v
		}
	}
	cfg, err := config.FromMap(vars)
	if err != nil {
		t.Fatal(err)
	}
	if opts.NATSURL != "" {
		g.watchEvents(t, opts.NATSURL)
	}
	every := intervals
	every.Reconcile = opts.ReconcileInterval
	gw, err := gateway.New(t.Context(), cfg, gateway.Options{
		Logger: logger, Listener: ln, Intervals: every,
		WrapHandler: func(h http.Handler) http.Handler {
			validating := contract.Validating(t, h)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				validating.ServeHTTP(&recordingWriter{ResponseWriter: w, seen: g.seen}, r)
			})
		},
	})
	if err != nil {
		t.Fatalf("%v\ngateway logs:\n%s", err, logs.String())
	}
	// The test's own connections: they outlive the gateway, so what it
	// logged and stored until it stopped is searched for secrets.
	g.DB, err = postgres.Open(t.Context(), database.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.DB.Close)
	g.gateway, g.Clusters, g.Volumes = gw, gw.Clusters(), gw.Volumes()
	g.stored = &registrytest.Fixture{DB: g.DB, Keys: keys, Logs: logs}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- gw.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("gateway: %v", err)
		}
		g.assertNoCanary(t)
		if t.Failed() {
			t.Logf("gateway logs:\n%s", logs.String())
		}
	})
	return g
}

// newKeyRing writes a fresh key ring to path.
func newKeyRing(t testing.TB, path string) *secrets.KeyRing {
	t.Helper()
	keys, err := secrets.NewKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return keys
}

// writeTokens writes a token file with one token per role.
func (g *Gateway) writeTokens(t testing.TB) {
	t.Helper()
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
}

// AddToken adds a token to the gateway's token file and reloads it, as
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
	if err := g.gateway.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(g.tokens, token)
	return token
}

// AssertNoSecret fails if secret appears in the logs or in any stored row of
// the environments and volumes tables.
func (g *Gateway) AssertNoSecret(t testing.TB, secret string) {
	t.Helper()
	g.stored.AssertNoSecret(t, secret)
}

// assertNoCanary fails the test if a bearer token the gateway accepts, or a
// cluster credential it stores, appears in its logs, in any answer it gave
// (headers included) or in any CloudEvent it published.
func (g *Gateway) assertNoCanary(t testing.TB) {
	t.Helper()
	secrets := append(strings.Fields(g.tokens.String()), g.stored.StoredSecrets(t)...)
	for _, secret := range secrets {
		for where, text := range map[string]string{"log": g.stored.Logs.String(), "answer or CloudEvent": g.seen.String()} {
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
