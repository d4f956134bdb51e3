package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Column runs sql, which selects one column, and returns that column of
// every row in order; an error fails the test.
func Column[T any](tb testing.TB, db Querier, sql string, args ...any) []T {
	tb.Helper()
	rows, err := db.Query(context.Background(), sql, args...)
	if err != nil {
		tb.Fatal(err)
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[T])
	if err != nil {
		tb.Fatal(err)
	}
	return values
}
