package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// groupWriteTimeout bounds one batch of a Group, and the solo retries of
// its callers after a refusal. groupLockTimeout bounds each statement's
// wait for a row lock within it (a fence behind a hand-over, a volume's row
// behind the status follower): a statement that waits longer is refused,
// so only its caller is sent again alone (and refused again if the lock
// still holds), instead of the whole batch running out of time with nobody
// knowing whether it committed. It is below Postgres's deadlock_timeout
// (1 s by default): a batch holds several environments' fence locks (FOR
// SHARE on their owner rows) until its commit, so a hand-over locking
// several of those rows can wait on it while it waits on them; the batch
// then gives way first, and the hand-over is not the one aborted.
const (
	groupWriteTimeout = 5 * time.Second
	groupLockTimeout  = 500 * time.Millisecond
)

// errLeaderPanicked is what the callers of a batch hear when the caller
// leading it panicked (in a queue or a scan): their statements may or may
// not have been sent.
var errLeaderPanicked = errors.New("group commit: the batch's leader panicked; the outcome is unknown")

// Group commits the writes of concurrent callers together (group commit).
// The first caller to arrive sends its statements at once; callers that
// arrive while that batch is in flight wait, and the first of them then
// sends all of theirs in one batch: one round trip and one commit for the
// lot. Under load the database commits once per batch rather than once per
// write — on a machine where Postgres shares the cores with everything
// else, a commit (its WAL flush above all) is much of what a short write
// costs — and no caller returns before its statements are committed. A
// leader sends one batch only (and, after a refusal, its callers alone),
// so no caller waits behind more than two batches.
//
// A batch is one implicit transaction, so a statement the server refuses
// (a lock waited for past groupLockTimeout included) aborts every
// caller's: the batch is then sent again one caller at a time, and a
// refusal costs no other caller its write. The process shares one Group
// among its hot paths (a create's intent and its claim, the audit rows of
// every request), so they share commits with each other too.
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
	var errs []error
	// Whatever happens to this caller, the others hear how their writes
	// ended and the next batch gets a leader.
	defer g.handOff(batch, w, &errs)
	errs = g.write(ctx, batch)
	return errs[slices.Index(batch, w)]
}

// handOff tells the callers of a batch other than its leader w how their
// writes ended (errLeaderPanicked when the leader never learned it), and
// hands the lead to the first caller waiting for the next batch.
func (g *Group) handOff(batch []*groupWrite, w *groupWrite, errs *[]error) {
	for i, other := range batch {
		switch {
		case other == w:
		case *errs == nil:
			other.turn <- groupTurn{err: errLeaderPanicked}
		default:
			other.turn <- groupTurn{err: (*errs)[i]}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) > 0 {
		g.pending[0].turn <- groupTurn{lead: true}
	} else {
		g.writing = false
	}
}

// write sends a batch and returns each write's outcome. When the server
// refused a statement (nothing committed), each write is sent again
// alone. Any other failure is every write's error alike, though the batch
// may have committed: a lost connection leaves that unknown, as it does to
// a single write, and a row that does not decode (a bug) is read after
// the server committed.
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
	// Local to the batch's transaction: the pooled session keeps its own.
	b.Queue(`SELECT set_config('lock_timeout', $1, true)`, groupLockTimeout.String())
	for _, w := range batch {
		w.err = nil
		w.queue(Batch{b: b, w: w})
	}
	return g.db.SendBatch(ctx, b).Close()
}
