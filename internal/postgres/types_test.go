package postgres_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// openTypeMap is the type map of a connection Open made.
func openTypeMap(tb testing.TB) *pgtype.Map {
	tb.Helper()
	conn, err := open(tb, pgtest.NewDatabase(tb).URL).Acquire(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(conn.Release)
	return conn.Conn().TypeMap()
}

// encodeUUID encodes id as a uuid parameter, as every fenced write passes
// its lease's incarnation.
func encodeUUID(tb testing.TB, m *pgtype.Map, id uuid.UUID, buf []byte) {
	out, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, id, buf[:0])
	if err != nil || len(out) != 16 || uuid.UUID(out) != id {
		tb.Fatalf("encoded %x, %v; want %x", out, err, id[:])
	}
}

// TestConnectionsEncodeUUIDsDirectly: Open's connections encode a
// google/uuid UUID without pgx's detour (a failed binary plan, its error
// formatted, then the text of its driver.Valuer): a fraction of the
// allocations (measured: 3 against 21).
func TestConnectionsEncodeUUIDsDirectly(t *testing.T) {
	m, id, buf := openTypeMap(t), uuid.New(), make([]byte, 0, 64)
	detour := pgtype.NewMap()
	allocs := func(m *pgtype.Map) float64 {
		encodeUUID(t, m, id, buf) // the plan is cached after the first
		return testing.AllocsPerRun(100, func() { encodeUUID(t, m, id, buf) })
	}
	if direct, other := allocs(m), allocs(detour); direct*4 > other {
		t.Fatalf("%v allocations per encoding on Open's connections, %v with pgx's own map; want under a quarter", direct, other)
	}
}

// BenchmarkEncodeUUID: encoding a google/uuid UUID as a uuid parameter on
// Open's connections, against pgx's own type map (the baseline) in the
// same run.
//
//	go test ./internal/postgres -run '^$' -bench EncodeUUID -benchmem
func BenchmarkEncodeUUID(b *testing.B) {
	id := uuid.New()
	for _, bm := range []struct {
		name string
		m    *pgtype.Map
	}{{"pgx", pgtype.NewMap()}, {"open", openTypeMap(b)}} {
		b.Run(bm.name, func(b *testing.B) {
			buf := make([]byte, 0, 64)
			for b.Loop() {
				encodeUUID(b, bm.m, id, buf)
			}
		})
	}
}
