package outbox

import (
	"cmp"
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/postgres"
)

// Subject is where the events go and where DCM's consumer reads storage
// status (deploy/README.md, Status events); DCM's stream dcm-status
// captures dcm.*.
const Subject = "dcm.storage"

// OrderKey is the VolumeID of events about something else than a volume's
// status (kind "snapshot", "tier"): ordered apart from any volume's and
// from each other, whatever the ids.
func OrderKey(kind, id string) string { return kind + "/" + id }

// Event is one row of the outbox: a CloudEvent (Data, structured mode)
// about a volume's status (or a snapshot's), published after the
// transaction that queued it commits, in queue order per volume.
type Event struct {
	// ID is the CloudEvent's id, sent as Nats-Msg-Id: JetStream drops a
	// repeat.
	ID            string
	EnvironmentID string
	// VolumeID orders the events: those of one volume go out in queue
	// order. Other events use OrderKey.
	VolumeID string
	// Subject is the NATS subject (empty: Subject, DCM's).
	Subject string
	Status  string
	Data    []byte
	// Epoch is the ownership epoch under which the event was queued.
	Epoch int64
}

// Writer runs the transactions that queue events, and wakes the relay once
// one that queued any has committed, naming the rows it queued: its callers
// never do.
type Writer struct {
	db    *pgxpool.Pool
	group *postgres.Group
	wake  func(ids []int64)
}

// WriterOptions configure a Writer.
type WriterOptions struct {
	DB *pgxpool.Pool
	// Wake, if set, is called after every commit that queued events,
	// with their outbox ids: the relay's Notify.
	Wake func(ids []int64)
	// Group commits Statement's writes with the process's other hot
	// writes (nil: a group of the writer's own).
	Group *postgres.Group
}

// NewWriter returns a Writer.
func NewWriter(opts WriterOptions) *Writer {
	if opts.Group == nil {
		opts.Group = postgres.NewGroup(opts.DB)
	}
	return &Writer{db: opts.DB, group: opts.Group, wake: opts.Wake}
}

// Tx is a transaction a Writer runs: the caller's statements and the
// events it queues (InsertTx) commit together or not at all.
type Tx struct {
	pgx.Tx
	queued *[]int64
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

// Statement writes one statement that may queue events (an INSERT INTO
// outbox within it, RETURNING id, whose ids scan appends to queued), with
// the concurrent writers' statements (postgres.Group): no transaction of
// its own, and one commit shared with them. The relay is woken with the ids
// once it committed. For the hot paths whose every write fits one statement
// (a create recording its claim and first status). queue may run more
// than once (see postgres.Group.Do); queued is empty each time.
func (w *Writer) Statement(ctx context.Context, queue func(b postgres.Batch, queued *[]int64)) error {
	var queued []int64
	err := w.group.Do(ctx, func(b postgres.Batch) {
		queued = queued[:0]
		queue(b, &queued)
	})
	w.woken(queued, err)
	return err
}

// woken wakes the relay for the events a successful commit queued.
func (w *Writer) woken(queued []int64, err error) {
	if err == nil && len(queued) > 0 && w.wake != nil {
		w.wake(queued)
	}
}

// InsertSQL begins the statement that queues an event, naming the columns
// of an Event (ID, EnvironmentID, VolumeID, Status, Data, Epoch) in that
// order: InsertTx completes it, and a Statement's SQL may end with it.
const InsertSQL = `INSERT INTO outbox (event_id, environment_id, volume_id, status, event, epoch)`

func (w *Writer) tx(ctx context.Context, derived bool, fn func(Tx) error) error {
	var queued []int64
	err := pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
		if derived {
			if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
				return err
			}
		}
		return fn(Tx{Tx: tx, queued: &queued})
	})
	w.woken(queued, err)
	return err
}

// InsertTx queues e in tx: it is published once tx has committed.
func InsertTx(ctx context.Context, tx Tx, e Event) error {
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO outbox (event_id, environment_id, volume_id, status, event, epoch, subject)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, e.ID, e.EnvironmentID, e.VolumeID, e.Status, e.Data, e.Epoch, cmp.Or(e.Subject, Subject)).Scan(&id)
	if err == nil {
		*tx.queued = append(*tx.queued, id)
	}
	return err
}
