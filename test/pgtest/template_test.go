package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A copy of the template has the schema the migrations make, and is the
// test's own: what one test writes, another never sees.
func TestMigratedDatabasesAreSeparateCopiesOfTheSchema(t *testing.T) {
	ctx := context.Background()
	a, b := NewMigratedDatabase(t), NewMigratedDatabase(t)
	fresh := NewDatabase(t)
	if err := migrate(ctx, fresh.URL); err != nil {
		t.Fatal(err)
	}
	tables := func(db Database) (string, int) {
		conn, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		var list string
		var version int
		if err := conn.QueryRow(ctx, `SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables
			WHERE table_schema = 'public'`).Scan(&list); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&version); err != nil {
			t.Fatal(err)
		}
		return list, version
	}
	want, wantVersion := tables(fresh)
	for _, db := range []Database{a, b} {
		if got, version := tables(db); got != want || version != wantVersion {
			t.Fatalf("%s has tables %s at version %d, want %s at %d", db.Name, got, version, want, wantVersion)
		}
	}
	conn, err := pgx.Connect(ctx, a.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, `INSERT INTO members (id, incarnation, advertise_url) VALUES ('x', gen_random_uuid(), 'http://x')`); err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(ctx) }()
	var n int
	if err := other.QueryRow(ctx, `SELECT count(*) FROM members`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("another copy sees %d members (%v)", n, err)
	}
}

// BenchmarkNewDatabase: a test's migrated database made by migrating a new
// one (the baseline) and by copying the template.
func BenchmarkNewDatabase(b *testing.B) {
	ctx := context.Background()
	b.Run("migrated", func(b *testing.B) {
		for b.Loop() {
			if err := migrate(ctx, NewDatabase(b).URL); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copied", func(b *testing.B) {
		NewMigratedDatabase(b) // the template, made once per binary
		for b.Loop() {
			NewMigratedDatabase(b)
		}
	})
}
