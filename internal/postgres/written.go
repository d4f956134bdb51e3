package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// WrittenSince is the condition that selects a followed table's rows written
// by transactions at or after the horizon passed as $1 (every row when it
// is 0). A followed table keeps in written_xid the transaction that last
// changed what its followers read (a trigger leaves the column alone on
// writes they ignore).
const WrittenSince = `written_xid >= $1::bigint::text::xid8`

// ReadWritten reads what a follower of a table has not read yet: the rows
// query selects with WrittenSince, each scanned into dest and handed to
// each, and returns the horizon of the next read — the oldest transaction
// still running just before query ran. Every transaction below it had
// ended, so what it wrote is in this read; one that commits later is at or
// above it, so the next read finds it. Rows written by transactions that
// were running and committed before query are read twice: a follower
// compares them with what it holds. head, when not empty, is a list of
// SQL expressions read in the same statement as the horizon, scanned into
// headDest (a row count, say, to tell deletions).
//
// Polling this costs an index lookup when nothing changed, where reading
// every row's revision cost the whole table each time. LISTEN/NOTIFY
// would not need the poll, but a listening session does not survive a
// transaction-pooling PgBouncer, and a notice lost while reconnecting is
// lost for good.
func ReadWritten(ctx context.Context, db *pgxpool.Pool, since int64, query string, dest []any, each func() error, head string, headDest ...any) (int64, error) {
	var next int64
	var b pgx.Batch
	horizon := `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`
	if head != "" {
		horizon += ", " + head
	}
	b.Queue(horizon).QueryRow(func(row pgx.Row) error { return row.Scan(append([]any{&next}, headDest...)...) })
	b.Queue(query, since).Query(func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, dest, each)
		return err
	})
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return 0, err
	}
	return next, nil
}
