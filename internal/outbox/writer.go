package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Subject is where the events go and where DCM's consumer reads storage
// status (deploy/README.md, Status events); DCM's stream dcm-status
// captures dcm.*.
const Subject = "dcm.storage"

// Event is one row of the outbox: a CloudEvent (Data, structured mode)
// about a volume's status, published after the transaction that queued it
// commits, in queue order per volume.
type Event struct {
	// ID is the CloudEvent's id, sent as Nats-Msg-Id: JetStream drops a
	// repeat.
	ID            string
	EnvironmentID string
	VolumeID      string
	Status        string
	Data          []byte
	// Epoch is the ownership epoch under which the event was queued.
	Epoch int64
}

// Writer runs the transactions that queue events, and wakes the relay once
// one that queued any has committed: its callers never do.
type Writer struct {
	db   *pgxpool.Pool
	wake func()
}

// WriterOptions configure a Writer.
type WriterOptions struct {
	DB *pgxpool.Pool
	// Wake, if set, is called after every commit that queued an event:
	// the relay's Notify.
	Wake func()
}

// NewWriter returns a Writer.
func NewWriter(opts WriterOptions) *Writer { return &Writer{db: opts.DB, wake: opts.Wake} }

// Tx is a transaction a Writer runs: the caller's statements and the
// events it queues (InsertTx) commit together or not at all.
type Tx struct {
	pgx.Tx
	queued *bool
}

// Tx runs fn in a transaction and commits it when fn returns nil.
func (w *Writer) Tx(ctx context.Context, fn func(Tx) error) error { return w.tx(ctx, false, fn) }

// DerivedTx is Tx for writes of state re-derived from the clusters after
// a crash (what a volume's claim shows): its commit does not wait for the
// WAL flush (synchronous_commit off for the transaction), which a busy
// disk can stall for a hundred milliseconds. A database crash can lose the
// last such commits, never a torn one: the status and its event go
// together, the next observation of the claim records them again, and an
// event id is fixed by the volume's transition, so one that went out before
// the crash is a repeat JetStream drops.
func (w *Writer) DerivedTx(ctx context.Context, fn func(Tx) error) error { return w.tx(ctx, true, fn) }

// Statement runs fn, which writes with one statement on the pool — a
// transaction of its own, so one round trip to Postgres — and says whether
// that statement queued an event (an INSERT INTO outbox within it); the
// relay is woken then. For the hot paths whose every write fits one
// statement (a create recording its claim and first status).
func (w *Writer) Statement(ctx context.Context, fn func(db *pgxpool.Pool) (queued bool, err error)) error {
	queued, err := fn(w.db)
	if err == nil && queued && w.wake != nil {
		w.wake()
	}
	return err
}

// InsertSQL begins the statement that queues an event, naming the columns
// of an Event (ID, EnvironmentID, VolumeID, Status, Data, Epoch) in that
// order: InsertTx completes it, and a Statement's SQL may end with it.
const InsertSQL = `INSERT INTO outbox (event_id, environment_id, volume_id, status, event, epoch)`

func (w *Writer) tx(ctx context.Context, derived bool, fn func(Tx) error) error {
	queued := false
	err := pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
		if derived {
			if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
				return err
			}
		}
		return fn(Tx{Tx: tx, queued: &queued})
	})
	if err == nil && queued && w.wake != nil {
		w.wake()
	}
	return err
}

// InsertTx queues e in tx: it is published once tx has committed.
func InsertTx(ctx context.Context, tx Tx, e Event) error {
	_, err := tx.Exec(ctx, InsertSQL+` VALUES ($1, $2, $3, $4, $5, $6)`, e.ID, e.EnvironmentID, e.VolumeID, e.Status, e.Data, e.Epoch)
	if err == nil {
		*tx.queued = true
	}
	return err
}
