package postgres_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// groupTable is a table whose rows say which transaction wrote them.
func groupTable(t *testing.T) (*pgxpool.Pool, *postgres.Group) {
	t.Helper()
	pool := open(t, pgtest.NewDatabase(t).URL)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE written (id int PRIMARY KEY, xid bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool, postgres.NewGroup(pool)
}

// insert queues a row for id stamped with the writing transaction, and
// reads it back (scan).
func insert(id int, got *int) func(postgres.Batch) {
	return func(b postgres.Batch) {
		b.Queue(func(row pgx.Row) error { return row.Scan(got) },
			`INSERT INTO written (id, xid) VALUES ($1, txid_current()) RETURNING id`, id)
	}
}

// whileBusy runs a write that holds the group's batch for a while, and
// then the writes of callers, all arriving while it is in flight; it
// returns each caller's error and what each caller read once Do returned.
func whileBusy(t *testing.T, g *postgres.Group, callers []func(postgres.Batch)) []error {
	t.Helper()
	slow := make(chan error, 1)
	go func() {
		slow <- g.Do(t.Context(), func(b postgres.Batch) { b.Queue(nil, `SELECT pg_sleep(0.5)`) })
	}()
	time.Sleep(100 * time.Millisecond)
	errs := make([]error, len(callers))
	var wg sync.WaitGroup
	for i, queue := range callers {
		wg.Go(func() { errs[i] = g.Do(t.Context(), queue) })
	}
	wg.Wait()
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	return errs
}

func TestGroupCommitsConcurrentWritesTogether(t *testing.T) {
	pool, g := groupTable(t)
	const n = 20
	got := make([]int, n+1)
	callers := make([]func(postgres.Batch), 0, n+1)
	for i := range n {
		callers = append(callers, insert(i+1, &got[i+1]))
	}
	// One caller's statement writes nothing: its ErrNoRows is its own.
	callers = append(callers, func(b postgres.Batch) {
		b.Queue(func(row pgx.Row) error { return row.Scan(&got[0]) },
			`INSERT INTO written (id, xid) SELECT 0, txid_current() WHERE false RETURNING id`)
	})
	errs := whileBusy(t, g, callers)
	for i := range n {
		if errs[i] != nil || got[i+1] != i+1 {
			t.Fatalf("caller %d: %v, read %d", i+1, errs[i], got[i+1])
		}
	}
	if !errors.Is(errs[n], pgx.ErrNoRows) {
		t.Fatalf("the caller whose statement wrote nothing got %v, want pgx.ErrNoRows", errs[n])
	}
	var rows, transactions int
	if err := pool.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT xid) FROM written`).Scan(&rows, &transactions); err != nil {
		t.Fatal(err)
	}
	if rows != n || transactions != 1 {
		t.Fatalf("%d callers arriving during one batch: %d rows in %d transactions, want %d in 1", n, rows, transactions, n)
	}
}

func TestGroupRefusalCostsOnlyItsCaller(t *testing.T) {
	pool, g := groupTable(t)
	var taken int
	if err := g.Do(t.Context(), insert(3, &taken)); err != nil {
		t.Fatal(err)
	}
	const n = 6
	got := make([]int, n)
	callers := make([]func(postgres.Batch), n)
	for i := range n {
		callers[i] = insert(i+1, &got[i])
	}
	errs := whileBusy(t, g, callers)
	for i, err := range errs {
		switch {
		case i+1 == 3:
			if postgres.ErrorCode(err) != pgerrcode.UniqueViolation {
				t.Fatalf("the caller writing a taken id got %v, want a unique violation", err)
			}
		case err != nil || got[i] != i+1:
			t.Fatalf("caller %d beside a refused one: %v, read %d", i+1, err, got[i])
		}
	}
	var rows int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM written`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Fatalf("%d rows written, want %d", rows, n)
	}
}
