package postgres

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// groupWriteTimeout bounds one batch of a Group, and the solo retries of
// its callers after a refusal.
const groupWriteTimeout = 5 * time.Second

// Group commits the writes of concurrent callers together (group commit).
// The first caller to arrive sends its statements at once; callers that
// arrive while that batch is in flight wait, and the first of them then
// sends all of theirs in one batch: one round trip and one commit for the
// lot. Under load the database commits once per batch rather than once per
// write — on a machine where Postgres shares the cores with everything
// else, a commit (its WAL flush above all) is much of what a short write
// costs — and no caller returns before its statements are committed. A
// leader sends one batch only, so no caller waits behind more than two.
//
// A batch is one implicit transaction, so a statement the server refuses
// aborts every caller's: the batch is then sent again one caller at a
// time, and a refusal costs no other caller its write. The process shares
// one Group among its hot paths (a create's intent and its claim, the
// audit rows of every request), so they share commits with each other too.
type Group struct {
	db *pgxpool.Pool

	mu      sync.Mutex
	pending []*groupWrite
	writing bool
}

// groupWrite is one caller's write waiting for a batch; turn says how the
// wait ended: written (err is its outcome), or told to lead the next
// batch.
type groupWrite struct {
	queue func(Batch)
	// err is what the caller's own statements returned (pgx.ErrNoRows).
	err  error
	turn chan groupTurn
}

type groupTurn struct {
	lead bool
	err  error
}

// NewGroup returns a Group writing to db.
func NewGroup(db *pgxpool.Pool) *Group { return &Group{db: db} }

// Batch is one caller's part of a Group's batch.
type Batch struct {
	b *pgx.Batch
	w *groupWrite
}

// Queue queues a statement. scan, when not nil, reads the statement's one
// row; pgx.ErrNoRows (a fenced write that wrote nothing, say) is this
// caller's own outcome, which Do returns and which affects no other
// caller. The scan must only store what it reads: on a refusal the caller's
// statements are queued, and scanned, again.
func (b Batch) Queue(scan func(pgx.Row) error, sql string, args ...any) {
	q := b.b.Queue(sql, args...)
	if scan == nil {
		return
	}
	w := b.w
	q.QueryRow(func(row pgx.Row) error {
		err := scan(row)
		if errors.Is(err, pgx.ErrNoRows) {
			if w.err == nil {
				w.err = err
			}
			return nil
		}
		return err
	})
}

// Do writes the statements queue queues, together with those of the
// callers writing now, and returns once they are committed: nil, the
// error a scan of the caller's returned, or the batch's error. queue may
// run more than once (again alone, after another caller's statement was
// refused); it runs on whichever caller leads the batch, while this one
// waits. The batch runs without ctx's cancellation (other callers' writes
// ride on it), bounded by its own timeout.
func (g *Group) Do(ctx context.Context, queue func(Batch)) error {
	w := &groupWrite{queue: queue, turn: make(chan groupTurn, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, w)
	lead := !g.writing
	g.writing = true
	g.mu.Unlock()
	if !lead {
		if turn := <-w.turn; !turn.lead {
			return turn.err
		}
	}
	g.mu.Lock()
	batch := g.pending
	g.pending = nil
	g.mu.Unlock()
	errs := g.write(ctx, batch)
	var err error
	for i, other := range batch {
		if other == w {
			err = errs[i]
		} else {
			other.turn <- groupTurn{err: errs[i]}
		}
	}
	g.mu.Lock()
	if len(g.pending) > 0 {
		g.pending[0].turn <- groupTurn{lead: true}
	} else {
		g.writing = false
	}
	g.mu.Unlock()
	return err
}

// write sends a batch and returns each write's outcome. When the server
// refused a statement (nothing committed), each write is sent again
// alone. Any other failure leaves the outcome unknown to all of them
// alike, as a lost connection does to a single write.
func (g *Group) write(ctx context.Context, batch []*groupWrite) []error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupWriteTimeout)
	defer cancel()
	errs := make([]error, len(batch))
	err := g.send(ctx, batch)
	var refused *pgconn.PgError
	if err == nil || len(batch) == 1 || !errors.As(err, &refused) {
		for i, w := range batch {
			errs[i] = cmp.Or(err, w.err)
		}
		return errs
	}
	for i, w := range batch {
		errs[i] = cmp.Or(g.send(ctx, []*groupWrite{w}), w.err)
	}
	return errs
}

// send queues every write's statements in one batch and runs it.
func (g *Group) send(ctx context.Context, batch []*groupWrite) error {
	b := &pgx.Batch{}
	for _, w := range batch {
		w.err = nil
		w.queue(Batch{b: b, w: w})
	}
	return g.db.SendBatch(ctx, b).Close()
}
