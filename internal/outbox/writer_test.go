package outbox_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// TestTheWriterWakesTheRelayOnceItsEventsCommitted: an event queued in a
// Writer's transaction is in the outbox once it commits, and the relay is
// woken then, once per transaction, with the rows' ids; a transaction that
// fails leaves no row and wakes nobody, and one that queued nothing wakes
// nobody either.
func TestTheWriterWakesTheRelayOnceItsEventsCommitted(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	reg.InsertEnvironment(t, "env")
	var wakes atomic.Int32
	var woken []int64
	w := outbox.NewWriter(outbox.WriterOptions{DB: reg.DB, Wake: func(ids []int64) { wakes.Add(1); woken = append(woken, ids...) }})
	rows := func() int {
		var n int
		if err := reg.DB.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	event := func(id string) outbox.Event {
		return outbox.Event{ID: id, EnvironmentID: "env", VolumeID: "v", Status: "RUNNING", Data: []byte(`{}`), Epoch: 1}
	}

	err := w.Tx(ctx, func(tx outbox.Tx) error {
		for _, id := range []string{"e-1", "e-2"} {
			if err := outbox.InsertTx(ctx, tx, event(id)); err != nil {
				return err
			}
		}
		if wakes.Load() != 0 {
			t.Error("the relay was woken before the commit")
		}
		return nil
	})
	if err != nil || rows() != 2 || wakes.Load() != 1 {
		t.Fatalf("a committed transaction of two events: %v, %d rows, %d wakes; want 2 rows, 1 wake", err, rows(), wakes.Load())
	}
	if ids := pgtest.Column[int64](t, reg.DB, `SELECT id FROM outbox ORDER BY id`); !slices.Equal(woken, ids) {
		t.Fatalf("woken with ids %v; the rows are %v", woken, ids)
	}

	failed := errors.New("the caller's own statement failed")
	err = w.Tx(ctx, func(tx outbox.Tx) error {
		if err := outbox.InsertTx(ctx, tx, event("e-3")); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) || rows() != 2 || wakes.Load() != 1 {
		t.Fatalf("a failed transaction: %v, %d rows, %d wakes; want its error, no row, no wake", err, rows(), wakes.Load())
	}

	if err := w.Tx(ctx, func(tx outbox.Tx) error {
		_, err := tx.Exec(ctx, `SELECT 1`)
		return err
	}); err != nil || wakes.Load() != 1 {
		t.Fatalf("a transaction that queued nothing: %v, %d wakes; want none", err, wakes.Load())
	}
}

// TestOnlyDerivedStateSkipsTheWALFlush: a derived transaction commits
// without waiting for the WAL flush, and only for itself; a Tx waits.
func TestOnlyDerivedStateSkipsTheWALFlush(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	w := outbox.NewWriter(outbox.WriterOptions{DB: reg.DB})
	setting := func(run func(context.Context, func(outbox.Tx) error) error) string {
		var got string
		if err := run(ctx, func(tx outbox.Tx) error {
			return tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got)
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := setting(w.DerivedTx); got != "off" {
		t.Errorf("in a derived transaction synchronous_commit is %q, want off", got)
	}
	if got := setting(w.Tx); got != "on" {
		t.Errorf("in a transaction after a derived one synchronous_commit is %q, want on (SET LOCAL ends with its transaction)", got)
	}
}
