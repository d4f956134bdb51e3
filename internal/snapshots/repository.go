package snapshots

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

var (
	errNotFound = errors.New("snapshot record not found")
	errExists   = errors.New("snapshot record exists")
	// errNotWritten: a fenced write wrote nothing (the lease is lost, or
	// the environment's generation moved on, or it is gone).
	errNotWritten = errors.New("fenced off: nothing was written")
)

// record is a snapshot's row: what was asked for, which VolumeSnapshot
// serves it, and the state last observed.
type record struct {
	Snapshot
	UID string
}

type repository struct {
	db    *pgxpool.Pool
	group *postgres.Group
	// outbox runs the transactions that record a state and queue its
	// event.
	outbox *outbox.Writer
}

const recordColumns = `environment_id, id, volume_id, namespace, snapshot_class, uid, status, status_message, restore_size, create_time, update_time`

func scanRecord(row pgx.Row) (record, error) {
	var r record
	var st string
	err := row.Scan(&r.EnvironmentID, &r.ID, &r.VolumeID, &r.Namespace, &r.SnapshotClass, &r.UID, &st, &r.Message,
		&r.RestoreSize, &r.CreateTime, &r.UpdateTime)
	if errors.Is(err, pgx.ErrNoRows) {
		return record{}, errNotFound
	}
	r.Status = Status(st)
	return r, err
}

func collect(rows pgx.Rows, err error) ([]record, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (record, error) { return scanRecord(row) })
}

func (r *repository) get(ctx context.Context, env, id string) (record, error) {
	return scanRecord(r.db.QueryRow(ctx, `SELECT `+recordColumns+` FROM snapshots WHERE environment_id = $1 AND id = $2`, env, id))
}

// insert records the intent to create a snapshot, with its idempotency key
// when the request carried one, in one implicit transaction shared with
// the other writes of the moment (postgres.Group), fenced by the owner's
// lease and the environment's generation.
func (r *repository) insert(ctx context.Context, rec *record, key *volumes.Key, lease membership.Lease, generation int64) error {
	err := r.group.Do(ctx, func(b postgres.Batch) {
		volumes.QueueKey(b, rec.EnvironmentID, key, lease, generation)
		b.Queue(func(row pgx.Row) error { return row.Scan(&rec.CreateTime, &rec.UpdateTime) },
			`INSERT INTO snapshots (environment_id, id, volume_id, namespace, snapshot_class, status, status_message)
				SELECT $1, $2, $3, $4, $5, $6, $7 WHERE `+membership.FenceSQL("$1::text", "$8", "$9")+` AND `+environments.GenerationSQL("$1::text", "$10")+
				` RETURNING create_time, update_time`,
			rec.EnvironmentID, rec.ID, rec.VolumeID, rec.Namespace, rec.SnapshotClass, string(rec.Status), rec.Message,
			lease.Epoch, lease.Incarnation, generation)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errNotWritten
	case postgres.ErrorCode(err) == pgerrcode.UniqueViolation:
		return errExists
	case postgres.ErrorCode(err) == pgerrcode.ForeignKeyViolation:
		return errNotWritten
	}
	return err
}

// remove forgets a snapshot whose VolumeSnapshot the cluster refused.
func (r *repository) remove(ctx context.Context, rec record, lease membership.Lease) error {
	_, err := r.db.Exec(ctx, `DELETE FROM snapshots WHERE environment_id = $1 AND id = $2 AND `+
		membership.FenceSQL("environment_id", "$3", "$4"), rec.EnvironmentID, rec.ID, lease.Epoch, lease.Incarnation)
	return err
}

// observed records what the cluster shows of a snapshot (uid empty keeps
// the recorded one) while lease holds, and, when its status changed, queues
// its event (events.go) in the same transaction — the first observation
// too, which reports the snapshot made (a new message alone, such as the
// controller's progress, is recorded, not reported). A DELETED record stays
// so, and a forgotten one is not written; a lost lease is an error.
func (r *repository) observed(ctx context.Context, rec record, o observation, uid string, lease membership.Lease, provider string) error {
	return r.outbox.Tx(ctx, func(tx outbox.Tx) error {
		if err := membership.Hold(ctx, tx, lease); err != nil {
			return err
		}
		var before, after int64
		var created time.Time
		err := tx.QueryRow(ctx, `WITH old AS (
				SELECT transitions FROM snapshots WHERE environment_id = $1 AND id = $2 AND status <> 'DELETED' FOR UPDATE)
			UPDATE snapshots s SET status = $3, status_message = $4, restore_size = $5,
				uid = CASE WHEN $6 = '' THEN s.uid ELSE $6 END, update_time = now(),
				transitions = s.transitions + CASE WHEN s.status <> $3 OR s.transitions = 0 THEN 1 ELSE 0 END
			FROM old WHERE s.environment_id = $1 AND s.id = $2
			RETURNING old.transitions, s.transitions, s.create_time`,
			rec.EnvironmentID, rec.ID, string(o.Status), o.Message, o.RestoreSize, uid).Scan(&before, &after, &created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if after == before {
			return nil
		}
		e, err := event(rec, o, provider, created, after, lease.Epoch)
		if err != nil {
			return err
		}
		return outbox.InsertTx(ctx, tx, e)
	})
}

// list returns a volume's live (not DELETED) records after id `after`, in
// id order.
func (r *repository) list(ctx context.Context, env, volume, after string, limit int) ([]record, error) {
	return collect(r.db.Query(ctx, `SELECT `+recordColumns+` FROM snapshots
		WHERE environment_id = $1 AND volume_id = $2 AND status <> 'DELETED' AND id > $3 ORDER BY id LIMIT $4`, env, volume, after, limit))
}

// live returns an environment's records not yet DELETED, for the
// reconciler.
func (r *repository) live(ctx context.Context, env string) ([]record, error) {
	return collect(r.db.Query(ctx, `SELECT `+recordColumns+` FROM snapshots WHERE environment_id = $1 AND status <> 'DELETED'`, env))
}

// withLive returns which of envs have a snapshot not yet DELETED.
func (r *repository) withLive(ctx context.Context, envs []string) ([]string, error) {
	rows, err := r.db.Query(ctx, `SELECT DISTINCT environment_id FROM snapshots WHERE environment_id = ANY($1) AND status <> 'DELETED'`, envs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// settled says whether a record is old enough for the cache to show what
// became of it (cacheLag), or for its create to have ended (createSettle).
func settled(rec record, after time.Duration) bool { return time.Since(rec.UpdateTime) > after }
