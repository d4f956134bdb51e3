// Package registrytest assembles a real environment registry for tests: a
// fresh migrated Postgres database, a generated key ring, the egress policy
// tests use (loopback explicitly allowed, as harness clusters listen there)
// and a log buffer that tests search for leaked secrets. It must never be
// imported by production code.
package registrytest

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/egress"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/secrets"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// Loopback is the allow-list tests use: harness clusters listen on 127.0.0.1.
var Loopback = egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// Options adjust a Fixture.
type Options struct {
	// Settings override SG_* settings of the registry (the egress policy,
	// probe timeout, insecure clusters). By default loopback is allowed
	// (harness clusters listen there) and probes time out after 5s.
	Settings map[string]string
}

// settings are what every test registry changes from production.
var settings = map[string]string{"SG_ALLOWED_CLUSTER_CIDRS": "127.0.0.0/8", "SG_PROBE_TIMEOUT": "5s"}

// Fixture is a ready registry (environments.Service) and what it runs on.
type Fixture struct {
	Registry    *environments.Service
	DB          *pgxpool.Pool
	Keys        *secrets.KeyRing
	KeyRingFile string
	Logs        *syncbuf.Buffer
	Logger      *slog.Logger
}

// New builds a Fixture on a new database; everything is released when the
// test ends.
func New(t testing.TB, opts Options) *Fixture {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewMigratedDatabase(t)
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pool, err := postgres.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	keys, err := secrets.NewKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "keyring.json")
	if err := keys.WriteFile(keyFile); err != nil {
		t.Fatal(err)
	}
	r := &Fixture{DB: pool, Keys: keys, KeyRingFile: keyFile, Logs: logs, Logger: logger}
	r.Registry = r.NewRegistry(t, opts)
	return r
}

// NewRegistry returns another registry over the same database and key
// ring, as a second replica or a restart with other settings would see them.
func (r *Fixture) NewRegistry(t testing.TB, opts Options) *environments.Service {
	t.Helper()
	vars := maps.Clone(settings)
	vars["SG_STATE_DIR"] = t.TempDir() // validated, unused by the registry
	maps.Copy(vars, opts.Settings)
	cfg, err := config.FromMap(vars)
	if err != nil {
		t.Fatal(err)
	}
	return environments.New(cfg, r.DB, r.Keys, nil, r.Logger)
}

// InsertEnvironment stores a bare environment row, unless one with that id
// exists: for tests of components that only need the row to exist (its
// credentials cannot be opened).
func (r *Fixture) InsertEnvironment(t testing.TB, id string) {
	t.Helper()
	if _, err := r.DB.Exec(context.Background(), `INSERT INTO environments (id, namespace, server, auth_type, credentials_key_id, credentials)
		VALUES ($1, 'ns', 'https://cluster.example.com', 'token', 'k1', '\x00') ON CONFLICT DO NOTHING`, id); err != nil {
		t.Fatal(err)
	}
}

// InsertVolume stores a volume record in namespace "ns" of an environment.
func (r *Fixture) InsertVolume(t testing.TB, envID, id string) {
	t.Helper()
	if _, err := r.DB.Exec(context.Background(), `INSERT INTO volumes (environment_id, id, namespace, spec) VALUES ($1, $2, 'ns', '{}')`, envID, id); err != nil {
		t.Fatal(err)
	}
}

// AssertNoSecret fails if secret appears in the logs, in any stored row of
// the environments and volumes tables (bytea columns are searched as the hex
// Postgres prints them) or in any of texts.
func (r *Fixture) AssertNoSecret(t testing.TB, secret string, texts ...string) {
	t.Helper()
	stored := r.DumpTable(t, "environments") + r.DumpTable(t, "volumes")
	for i, s := range append([]string{r.Logs.String(), stored}, texts...) {
		if strings.Contains(s, secret) || strings.Contains(s, hex.EncodeToString([]byte(secret))) {
			t.Fatalf("secret found in text %d", i)
		}
	}
}

// DumpTable returns every row of table as text, to search stored bytes for
// secrets that must only exist sealed.
func (r *Fixture) DumpTable(t testing.TB, table string) string {
	t.Helper()
	rows, err := r.DB.Query(context.Background(), `SELECT t::text FROM `+table+` t`)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var line string
	for rows.Next() {
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		out.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// StoredSecrets opens every stored environment's sealed credentials and
// returns the secrets in them (tokens, client keys): canaries a test then
// greps its logs, answers and events for.
func (r *Fixture) StoredSecrets(t testing.TB) []string {
	t.Helper()
	rows, err := r.DB.Query(context.Background(), `SELECT id, credentials_key_id, credentials_generation, credentials FROM environments`)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	var id string
	var sealed secrets.Sealed
	if _, err := pgx.ForEachRow(rows, []any{&id, &sealed.KeyID, &sealed.Generation, &sealed.Blob}, func() error {
		plain, err := r.Keys.Open(id, sealed)
		if err != nil {
			return nil // a test that damaged a row on purpose
		}
		var creds environments.ExplicitCredentials
		if err := json.Unmarshal(plain, &creds); err != nil {
			return err
		}
		if creds.Token != "" {
			found = append(found, creds.Token)
		}
		if len(creds.ClientKeyData) > 0 {
			found = append(found, string(creds.ClientKeyData))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// Member joins the fixture's database as a replica: a real Membership,
// heartbeating until the test ends, that owns every environment while it is
// the only member and claims one registered through the fixture's registry
// at once, as the gateway's does. The parts that act for owned environments
// only (the connector, probes, status recording, the fleet feed, the DCM
// registrar) take it as their ownership.
func (r *Fixture) Member(t testing.TB, id string) *membership.Membership {
	t.Helper()
	m := membership.New(membership.Options{DB: r.DB, ID: id, Lease: 20 * time.Second, Logger: r.Logger})
	registrations := r.Registry.Subscribe()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(ctx) })
	wg.Go(func() { registrations.Run(ctx, func(context.Context, environments.Change) { m.Rebalance() }) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return m
}

// Own waits until m owns the environments ids (registered already), asking
// it to rebalance at once rather than at its next heartbeat.
func Own(t testing.TB, m *membership.Membership, ids ...string) {
	t.Helper()
	m.Rebalance()
	poll.Until(t, 10*time.Second, fmt.Sprintf("own %v", ids), func() bool {
		for _, id := range ids {
			if !m.Owns(id) {
				m.Rebalance()
				return false
			}
		}
		return true
	})
}
