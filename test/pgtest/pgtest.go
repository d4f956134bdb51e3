// Package pgtest gives each test its own database on the real Postgres
// server (SG_TEST_DATABASE_URL, default the local server), empty or with the
// gateway's schema, dropped when the test ends. It must never be imported by
// production code.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// DefaultServerURL is the maintenance database of the machine's Postgres.
const DefaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL is the maintenance-database URL tests create databases through.
func ServerURL() string {
	if u := os.Getenv("SG_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultServerURL
}

// Database is one test's database.
type Database struct {
	Name string
	URL  string
}

// NewDatabase creates a uniquely named database. It is dropped (connections
// terminated) when the test ends.
func NewDatabase(t testing.TB) Database {
	t.Helper()
	return newDatabase(t, "")
}

// newDatabase creates a uniquely named database with the CREATE DATABASE
// options given, dropped when the test ends.
func newDatabase(t testing.TB, options string) Database {
	t.Helper()
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	db := Database{Name: "sg_test_" + hex.EncodeToString(suffix)}
	db.URL = URLFor(t, db.Name)
	exec(t, "CREATE DATABASE "+pgx.Identifier{db.Name}.Sanitize()+options)
	t.Cleanup(func() { db.Drop(t) })
	return db
}

// URLFor returns the URL of database name on the test server (which need not
// exist).
func URLFor(t testing.TB, name string) string {
	t.Helper()
	u, err := urlFor(name)
	if err != nil {
		t.Fatalf("SG_TEST_DATABASE_URL: %v", err)
	}
	return u
}

func urlFor(name string) (string, error) {
	u, err := url.Parse(ServerURL())
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// Drop drops the database now, terminating its connections (to test how the
// gateway behaves when its database disappears).
func (db Database) Drop(t testing.TB) {
	t.Helper()
	exec(t, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.Name}.Sanitize()+" WITH (FORCE)")
}

func exec(t testing.TB, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatalf("connect to test Postgres: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
