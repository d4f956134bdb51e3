package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"
)

// Open connects a pool and verifies the server answers within the context's
// deadline, so a bad URL fails at start rather than on the first request.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("parse database URL: invalid connection string")
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "storage-gateway"
	cfg.HealthCheckPeriod = 15 * time.Second
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		registerTypes(conn.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		hint := ""
		if ErrorCode(err) == pgerrcode.InvalidCatalogName {
			hint = "; create it with `storage-gateway migrate --create-database`"
		}
		return nil, fmt.Errorf("connect to database %s: %w%s", describe(cfg.ConnConfig), safeErr(err), hint)
	}
	return pool, nil
}

// registerTypes teaches a connection's type map the Go types the gateway
// passes that pgx does not know: google/uuid's UUID, which every fenced
// write passes (the lease's incarnation). Unknown, it is encoded through a
// failed binary plan (an error built with fmt) and then its driver.Valuer
// text (BenchmarkEncodeUUID).
func registerTypes(m *pgtype.Map) { pgxuuid.Register(m) }

// EnsureDatabase creates the database named in url if it does not exist yet, by
// connecting to the server's maintenance database "postgres" with the same
// credentials. It exists so `make run` works on a fresh machine.
func EnsureDatabase(ctx context.Context, url string) error {
	skipped := func(name string) (bool, error) { return name == "" || name == "postgres", nil }
	return onMaintenance(ctx, url, skipped, func(conn *pgx.Conn, name string) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		if err != nil && ErrorCode(err) != pgerrcode.DuplicateDatabase {
			return fmt.Errorf("create database %q: %w", name, safeErr(err))
		}
		return nil
	})
}

// DropDatabase drops the database named in url, if it exists, closing its
// connections, from the server's maintenance database. It exists for
// `make run-reset`, which starts local runs afresh; the maintenance and
// template databases are refused.
func DropDatabase(ctx context.Context, url string) error {
	refused := func(name string) (bool, error) {
		if name == "" || name == "postgres" || name == "template0" || name == "template1" {
			return false, fmt.Errorf("refusing to drop database %q", name)
		}
		return false, nil
	}
	return onMaintenance(ctx, url, refused, func(conn *pgx.Conn, name string) error {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %q: %w", name, safeErr(err))
		}
		return nil
	})
}

// onMaintenance runs fn on a connection to the maintenance database
// "postgres" of url's server, with url's credentials, passing the name of
// the database url names — unless skip, asked first, says there is nothing
// to do or refuses that name.
func onMaintenance(ctx context.Context, url string, skip func(name string) (bool, error), fn func(conn *pgx.Conn, name string) error) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return errors.New("parse database URL: invalid connection string")
	}
	name := cfg.Database
	if skipped, err := skip(name); skipped || err != nil {
		return err
	}
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to maintenance database on %s: %w", describe(cfg), safeErr(err))
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return fn(conn, name)
}

// describe names the server and database without credentials.
func describe(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d/%s", c.Host, c.Port, c.Database)
}

// safeErr keeps the Postgres error text (it never contains the password) but
// drops wrapped connection strings that pgconn may include.
func safeErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Errorf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return errors.Unwrap(connErr)
	}
	return err
}

// Unavailable reports whether err says the database cannot serve right
// now, rather than that a statement failed: the server is shutting down or
// starting (57P01, 57P02, 57P03), the connection failed or broke (class
// 08, a connect error, the connection closed under a statement, a network
// error). The API answers these 503 with Retry-After: a restarting
// database is a wait, not a fault.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	switch code := ErrorCode(err); {
	case code == pgerrcode.AdminShutdown, code == pgerrcode.CrashShutdown, code == pgerrcode.CannotConnectNow,
		pgerrcode.IsConnectionException(code):
		return true
	case code != "":
		return false
	}
	var connect *pgconn.ConnectError
	var network net.Error
	return errors.As(err, &connect) || errors.As(err, &network) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// ErrorCode returns the SQLSTATE of a Postgres error in err's chain, or "".
// Compare it with the pgerrcode constants.
func ErrorCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
