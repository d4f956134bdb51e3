package postgres_test

import (
	"context"
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

// duringABatch runs arrive while a write that holds the group's batch for
// half a second is in flight (watch, a pool of its own, sees it running);
// every caller arrive starts queues behind it.
func duringABatch(t *testing.T, watch *pgxpool.Pool, g *postgres.Group, arrive func()) {
	t.Helper()
	slow := make(chan error, 1)
	go func() {
		slow <- g.Do(t.Context(), func(b postgres.Batch) { b.Queue(nil, `SELECT pg_sleep(0.5)`) })
	}()
	pgtest.AwaitActivity(t, watch, "the slow batch running", "state = 'active' AND query = 'SELECT pg_sleep(0.5)'")
	arrive()
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// whileBusy runs the callers' writes, all arriving while another batch is
// in flight, and returns each caller's error once all returned.
func whileBusy(t *testing.T, watch *pgxpool.Pool, g *postgres.Group, callers []func(postgres.Batch)) []error {
	t.Helper()
	errs := make([]error, len(callers))
	duringABatch(t, watch, g, func() {
		var wg sync.WaitGroup
		for i, queue := range callers {
			wg.Go(func() { errs[i] = g.Do(t.Context(), queue) })
		}
		wg.Wait()
	})
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
	errs := whileBusy(t, pool, g, callers)
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
	errs := whileBusy(t, pool, g, callers)
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

// A statement waiting for a row lock gives way within the group's lock
// timeout, and only its caller fails: the others' rows are written. The
// timeout is the batch's own, not the pooled session's.
func TestGroupLockWaitFailsOnlyItsCaller(t *testing.T) {
	url := pgtest.NewDatabase(t).URL
	holder := open(t, url)
	if _, err := holder.Exec(t.Context(), `CREATE TABLE written (id int PRIMARY KEY, xid bigint NOT NULL);
		INSERT INTO written VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // the session checked below is the one the batches ran on
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	g := postgres.NewGroup(pool)
	lock, err := holder.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := lock.Exec(t.Context(), `SELECT 1 FROM written WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	const n = 5
	got := make([]int, n)
	callers := []func(postgres.Batch){func(b postgres.Batch) { b.Queue(nil, `UPDATE written SET xid = 1 WHERE id = 1`) }}
	for i := range n {
		callers = append(callers, insert(i+2, &got[i]))
	}
	start := time.Now()
	errs := whileBusy(t, holder, g, callers)
	if postgres.ErrorCode(errs[0]) != pgerrcode.LockNotAvailable {
		t.Fatalf("the caller waiting for a held row got %v, want lock_not_available", errs[0])
	}
	for i, err := range errs[1:] {
		if err != nil || got[i] != i+2 {
			t.Fatalf("caller %d beside a waiting one: %v, read %d", i+2, err, got[i])
		}
	}
	if waited := time.Since(start); waited > 4*time.Second {
		t.Fatalf("the callers waited %s for a held row lock", waited)
	}
	var timeout string
	if err := pool.QueryRow(t.Context(), `SHOW lock_timeout`).Scan(&timeout); err != nil || timeout != "0" {
		t.Fatalf("the pooled session's lock_timeout is %q (%v) after the batches, want its own 0", timeout, err)
	}
}

// A batch in a lock cycle with another transaction gives way before
// Postgres's deadlock detector aborts the other one, even when the other
// began waiting first: a hand-over locking several owner rows is never
// the one aborted for a batch that holds some of them.
func TestGroupGivesWayInALockCycle(t *testing.T) {
	pool, g := groupTable(t)
	if _, err := pool.Exec(t.Context(), `INSERT INTO written VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	other, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := other.Exec(t.Context(), `UPDATE written SET xid = 1 WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	// The batch holds row 1, pauses, then waits for row 2; the other
	// transaction waits for row 1 during the pause, so it waits first.
	batch := make(chan error, 1)
	go func() {
		batch <- g.Do(t.Context(), func(b postgres.Batch) {
			b.Queue(nil, `SELECT 1 FROM written WHERE id = 1 FOR SHARE`)
			b.Queue(nil, `SELECT pg_sleep(0.3)`)
			b.Queue(nil, `SELECT 1 FROM written WHERE id = 2 FOR SHARE`)
		})
	}()
	pgtest.AwaitActivity(t, pool, "the batch holding row 1", "query = 'SELECT pg_sleep(0.3)'")
	if _, err := other.Exec(t.Context(), `UPDATE written SET xid = 1 WHERE id = 1`); err != nil {
		t.Fatalf("the other transaction of the lock cycle was aborted: %v", err)
	}
	if err := <-batch; postgres.ErrorCode(err) != pgerrcode.LockNotAvailable {
		t.Fatalf("the batch in the lock cycle got %v, want lock_not_available", err)
	}
}

// A caller's statements that panic on the batch's leader leave no caller
// waiting for ever, and the group writes again afterwards.
func TestGroupOutlivesAPanic(t *testing.T) {
	pool, g := groupTable(t)
	var got int
	callers := []func(postgres.Batch){
		insert(1, &got),
		func(postgres.Batch) { panic("a bug in a caller's statements") },
		insert(2, &got),
	}
	done := make(chan any, len(callers))
	panics := 0
	duringABatch(t, pool, g, func() {
		for _, queue := range callers {
			go func() { done <- recovered(func() error { return g.Do(t.Context(), queue) }) }()
		}
		for range callers {
			select {
			case v := <-done:
				if _, ok := v.(string); ok {
					panics++
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a caller of a batch whose leader panicked never returned")
			}
		}
	})
	if panics != 1 {
		t.Fatalf("%d callers panicked, want the leader only", panics)
	}
	if err := g.Do(t.Context(), insert(3, &got)); err != nil || got != 3 {
		t.Fatalf("a write after the panic: %v, read %d", err, got)
	}
	var rows int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM written WHERE id = 3`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("the write after the panic stored %d rows (%v)", rows, err)
	}
}

// recovered is what fn returned, or the value it panicked with.
func recovered(fn func() error) (v any) {
	defer func() {
		if p := recover(); p != nil {
			v = p
		}
	}()
	return fn()
}
