package environments_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// BenchmarkIdleRegistryRead: one read of the registry's watch of 10,000
// environments none of which changed — what every replica does every 2 s
// while the fleet is idle — beside the baseline of reading every row's
// revision, which the watch did before it read only rows written since its
// last read.
//
//	go test ./internal/environments -run '^$' -bench IdleRegistryRead
func BenchmarkIdleRegistryRead(b *testing.B) {
	ctx := context.Background()
	reg := registrytest.New(b, registrytest.Options{})
	if _, _, err := reg.Registry.Register(ctx, registration(b, "fleet")); err != nil {
		b.Fatal(err)
	}
	// 9,999 more rows like it, whatever their other columns hold.
	if _, err := reg.DB.Exec(ctx, `INSERT INTO environments
		SELECT (jsonb_populate_record(NULL::environments, to_jsonb(e) || jsonb_build_object('id', e.id || '-' || g))).*
		FROM environments e, generate_series(1, 9999) g`); err != nil {
		b.Fatal(err)
	}
	if _, err := reg.DB.Exec(ctx, `VACUUM ANALYZE environments`); err != nil {
		b.Fatal(err)
	}
	b.Run("every row's revision (baseline)", func(b *testing.B) {
		for b.Loop() {
			rows, err := reg.DB.Query(ctx, `SELECT id, generation, credentials_generation, state,
				COALESCE(dcm_registration->>'provider_id', '') FROM environments`)
			if err != nil {
				b.Fatal(err)
			}
			seen := map[string]bool{}
			var id, state, provider string
			var generation, credentials int64
			if _, err := pgx.ForEachRow(rows, []any{&id, &generation, &credentials, &state, &provider}, func() error {
				seen[id] = true
				return nil
			}); err != nil || len(seen) != 10000 {
				b.Fatalf("read %d rows: %v", len(seen), err)
			}
		}
	})
	b.Run("rows written since the last read", func(b *testing.B) {
		read := reg.Registry.WatchReads()
		if _, err := read(ctx); err != nil { // learns the rows
			b.Fatal(err)
		}
		for b.Loop() {
			if changes, err := read(ctx); err != nil || len(changes) != 0 {
				b.Fatalf("an idle read: %v, %v", changes, err)
			}
		}
	})
}
