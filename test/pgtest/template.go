package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/migrations"
)

// Most tests need the gateway's schema, and migrating a database costs far
// more than copying one. So the migrations are applied once, to a template
// database named by their digest, and each test's database is a copy of it
// (CREATE DATABASE … TEMPLATE). The template is made under an advisory lock
// (test binaries of several packages run at once) and published by a
// rename, so a half-made one is never copied; templates of other migration
// sets are dropped then. Nothing ever connects to a published template,
// which copying requires.

// templatePrefix names the template databases.
const templatePrefix = "sg_template_"

var template struct {
	once sync.Once
	name string
	err  error
}

// NewMigratedDatabase is NewDatabase with the gateway's schema in place: a
// copy of the template of the embedded migrations.
func NewMigratedDatabase(t testing.TB) Database {
	t.Helper()
	template.once.Do(func() { template.name, template.err = migratedTemplate() })
	if template.err != nil {
		t.Fatalf("template database: %v", template.err)
	}
	return newDatabase(t, " TEMPLATE "+pgx.Identifier{template.name}.Sanitize())
}

// migratedTemplate returns the name of the template of the embedded
// migrations, making it if it does not exist yet.
func migratedTemplate() (string, error) {
	digest := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(migrations.FS, path)
		fmt.Fprintf(digest, "%s\x00%d\x00", path, len(data))
		digest.Write(data)
		return err
	})
	if err != nil {
		return "", err
	}
	name := templatePrefix + hex.EncodeToString(digest.Sum(nil))[:16]
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return "", fmt.Errorf("connect to test Postgres: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	// Held until this connection closes.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", templatePrefix); err != nil {
		return "", err
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil || exists {
		return name, err
	}
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE starts_with(datname, $1)", templatePrefix)
	if err != nil {
		return "", err
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	for _, old := range stale {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{old}.Sanitize()+" WITH (FORCE)"); err != nil {
			return "", err
		}
	}
	making := name + "_making"
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{making}.Sanitize()); err != nil {
		return "", err
	}
	url, err := urlFor(making)
	if err != nil {
		return "", err
	}
	if err := migrate(ctx, url); err != nil {
		return "", err
	}
	_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{making}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize())
	return name, err
}

// migrate applies the embedded migrations to the database at url and
// closes every connection to it.
func migrate(ctx context.Context, url string) error {
	pool, err := postgres.Open(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := postgres.NewMigrator(pool, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer func() { _ = m.Close() }()
	_, err = m.Up(ctx)
	return err
}
