package postgres

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/dcm-project/storage-gateway/migrations"
)

// Migrator applies the embedded migrations and reports whether the database
// schema is current. It takes a Postgres advisory lock while migrating, so
// several gateway replicas starting at once apply each migration exactly once.
type Migrator struct {
	provider *goose.Provider
}

// NewMigrator prepares a migrator over pool. The returned migrator shares the
// pool's connections; closing the pool ends it.
func NewMigrator(pool *pgxpool.Pool, logger *slog.Logger) (*Migrator, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, stdlib.OpenDBFromPool(pool), migrations.FS,
		goose.WithSessionLocker(locker),
		goose.WithSlog(logger.With("component", "migrations")),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return &Migrator{provider: provider}, nil
}

// Up applies every pending migration and returns how many were applied.
func (m *Migrator) Up(ctx context.Context) (int, error) {
	results, err := m.provider.Up(ctx)
	if err != nil {
		return len(results), fmt.Errorf("apply migrations: %w", err)
	}
	return len(results), nil
}

// Versions returns the database's schema version and the newest embedded one.
func (m *Migrator) Versions(ctx context.Context) (current, target int64, err error) {
	return m.provider.GetVersions(ctx)
}

// CheckCurrent returns an error unless every embedded migration is applied.
func (m *Migrator) CheckCurrent(ctx context.Context) error {
	current, target, err := m.Versions(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current < target {
		return fmt.Errorf("schema version %d, binary needs %d: run `storage-gateway migrate`", current, target)
	}
	return nil
}

// Close releases the connections the migrator borrowed from the pool; call it
// before closing the pool, which otherwise waits for them.
func (m *Migrator) Close() error { return m.provider.Close() }
