package postgres_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

var discard = slog.New(slog.DiscardHandler)

func open(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func migrator(t *testing.T, pool *pgxpool.Pool) *postgres.Migrator {
	t.Helper()
	m, err := postgres.NewMigrator(pool, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestMigrationsApplyOnceAndReportCurrent(t *testing.T) {
	pool := open(t, pgtest.NewDatabase(t).URL)
	m := migrator(t, pool)

	if err := m.CheckCurrent(t.Context()); err == nil || !strings.Contains(err.Error(), "storage-gateway migrate") {
		t.Fatalf("fresh database: CheckCurrent = %v, want an error telling to migrate", err)
	}
	applied, err := m.Up(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	current, target, err := m.Versions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if applied == 0 || current != target {
		t.Fatalf("after Up: applied %d, version %d of %d", applied, current, target)
	}
	if err := m.CheckCurrent(t.Context()); err != nil {
		t.Fatalf("after Up: %v", err)
	}
	again, err := m.Up(t.Context())
	if err != nil || again != 0 {
		t.Fatalf("second Up applied %d (err %v), want 0", again, err)
	}
	// The schema is really there.
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM environments").Scan(&n); err != nil {
		t.Fatalf("environments table: %v", err)
	}
}

func TestConcurrentMigratorsApplyEachMigrationOnce(t *testing.T) {
	url := pgtest.NewDatabase(t).URL
	const replicas = 4
	applied := make([]int, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		pool := open(t, url)
		m := migrator(t, pool)
		wg.Go(func() { applied[i], errs[i] = m.Up(t.Context()) })
	}
	wg.Wait()
	total := 0
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	_, target, err := migrator(t, open(t, url)).Versions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if int64(total) != target {
		t.Fatalf("replicas applied %d migrations in total, want each of %d exactly once", total, target)
	}
}

func TestEnsureDatabaseCreatesOnceAndIsIdempotent(t *testing.T) {
	db := pgtest.Database{Name: "sg_test_ensure_database"}
	db.URL = pgtest.URLFor(t, db.Name)
	db.Drop(t)
	t.Cleanup(func() { db.Drop(t) })

	if _, err := postgres.Open(t.Context(), db.URL); err == nil {
		t.Fatal("database exists before EnsureDatabase")
	}
	for range 2 {
		if err := postgres.EnsureDatabase(t.Context(), db.URL); err != nil {
			t.Fatal(err)
		}
	}
	open(t, db.URL)
}

func TestOpenErrorsNeverContainThePassword(t *testing.T) {
	const secret = "hunter2-very-secret"
	url := "postgres://postgres:" + secret + "@127.0.0.1:1/nope?sslmode=disable&connect_timeout=2"
	_, err := postgres.Open(context.Background(), url)
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("error leaks the password: %v", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1/nope") {
		t.Fatalf("error %q does not say which server failed", err)
	}
	if err := postgres.EnsureDatabase(context.Background(), url); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("EnsureDatabase error %v: want an error without the password", err)
	}
}

// What a restarting or unreachable database says is told apart from a
// statement that failed.
func TestUnavailable(t *testing.T) {
	db := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	_, statementErr := admin.Exec(t.Context(), "SELEC 1")
	var pid uint32
	if err := conn.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(t.Context(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	_, terminatedErr := conn.Exec(t.Context(), "SELECT 1")
	_, refusedErr := pgx.Connect(t.Context(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
	for name, tt := range map[string]struct {
		err  error
		want bool
	}{
		"a terminated connection":     {terminatedErr, true},
		"a refused connection":        {refusedErr, true},
		"the server starting (57P03)": {&pgconn.PgError{Code: "57P03"}, true},
		"a syntax error":              {statementErr, false},
		"a unique violation":          {&pgconn.PgError{Code: "23505"}, false},
		"a cancelled request":         {context.Canceled, false},
		"no error":                    {nil, false},
	} {
		if got := postgres.Unavailable(tt.err); got != tt.want {
			t.Errorf("%s (%v): Unavailable %v, want %v", name, tt.err, got, tt.want)
		}
	}
}
