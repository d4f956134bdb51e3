package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/status"
)

var (
	errNotFound      = errors.New("volume record not found")
	errExists        = errors.New("volume record exists")
	errNoEnvironment = errors.New("environment deleted")
	// errNotWritten: a fenced write wrote nothing (the lease is lost, or
	// the environment's generation moved on).
	errNotWritten = errors.New("fenced off: nothing was written")
	// errStaleSpec: a create was decided under a spec of its environment
	// that is no longer current.
	errStaleSpec = errors.New("the environment changed since its spec was read")
)

// record is a volume's row: what was asked for, which claim serves it, and
// the status last observed.
type record struct {
	EnvironmentID string
	ID            string
	Spec          Spec
	PVCUID        string
	Status        status.Status
	Message       string
	CreateTime    time.Time
	UpdateTime    time.Time
	// VolumeName is the bound PersistentVolume as last recorded.
	VolumeName string
	// ReportedTier is the tier state last reported (tierKey).
	ReportedTier string
}

// repository is the volumes' queries; the writes on a create's path go
// through group.
type repository struct {
	db    *pgxpool.Pool
	group *postgres.Group
}

const recordColumns = `environment_id, id, spec, pvc_uid, status, status_message, create_time, update_time, volume_name, reported_tier`

func scanRecord(row pgx.Row) (record, error) {
	var r record
	var spec []byte
	var st string
	err := row.Scan(&r.EnvironmentID, &r.ID, &spec, &r.PVCUID, &st, &r.Message, &r.CreateTime, &r.UpdateTime, &r.VolumeName, &r.ReportedTier)
	if errors.Is(err, pgx.ErrNoRows) {
		return record{}, errNotFound
	}
	if err != nil {
		return record{}, err
	}
	r.Status = status.Status(st)
	if err := json.Unmarshal(spec, &r.Spec); err != nil {
		return record{}, fmt.Errorf("decode volume %s/%s: %w", r.EnvironmentID, r.ID, err)
	}
	return r, nil
}

func (r *repository) get(ctx context.Context, env, id string) (record, error) {
	return scanRecord(r.db.QueryRow(ctx, `SELECT `+recordColumns+` FROM volumes WHERE environment_id = $1 AND id = $2`, env, id))
}

// insert records the intent to create a volume, with its idempotency key
// when the request carried one, in one implicit transaction shared with
// the other writes of the moment (postgres.Group): a retry finds either
// both or neither. Both are fenced by the owner's lease (the first
// statement's lock holds to the commit) and by the environment's
// generation the spec was resolved under; either fence failing writes
// nothing and returns errNotWritten.
func (r *repository) insert(ctx context.Context, rec *record, key *Key, lease membership.Lease, generation int64) error {
	spec, err := json.Marshal(rec.Spec)
	if err != nil {
		return err
	}
	err = r.group.Do(ctx, func(b postgres.Batch) {
		QueueKey(b, rec.EnvironmentID, key, lease, generation)
		b.Queue(func(row pgx.Row) error { return row.Scan(&rec.CreateTime, &rec.UpdateTime) },
			`INSERT INTO volumes (environment_id, id, namespace, spec, status, status_message)
				SELECT $1, $2, $3, $4, $5, $6 WHERE `+membership.FenceSQL("$1::text", "$7", "$8")+` AND `+environments.GenerationSQL("$1::text", "$9")+
				` RETURNING create_time, update_time`,
			rec.EnvironmentID, rec.ID, rec.Spec.Namespace, spec, string(rec.Status), rec.Message, lease.Epoch, lease.Incarnation, generation)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return errNotWritten
	}
	switch postgres.ErrorCode(err) {
	case pgerrcode.UniqueViolation: // a concurrent create won
		return errExists
	case pgerrcode.ForeignKeyViolation: // the environment was deleted
		return errNoEnvironment
	}
	return err
}

// withLiveVolumes returns which of envs have a volume not yet DELETED.
func (r *repository) withLiveVolumes(ctx context.Context, envs []string) ([]string, error) {
	rows, err := r.db.Query(ctx, `SELECT DISTINCT environment_id FROM volumes
		WHERE environment_id = ANY($1) AND status <> 'DELETED'`, envs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// remove forgets a volume's record while lease holds.
func (r *repository) remove(ctx context.Context, env, id string, lease membership.Lease) error {
	_, err := r.db.Exec(ctx, `DELETE FROM volumes WHERE environment_id = $1 AND id = $2 AND `+
		membership.FenceSQL("environment_id", "$3", "$4"), env, id, lease.Epoch, lease.Incarnation)
	return err
}

// execer runs a statement: the pool, or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// setClaim records the claim that serves a volume; it reports false when
// the volume is being or has been deleted (the claim is then unwanted). The
// caller's transaction holds the owner's lease (membership.Hold).
func (r *repository) setClaim(ctx context.Context, db execer, env, id, uid string) (bool, error) {
	tag, err := db.Exec(ctx, `UPDATE volumes SET pvc_uid = $3, update_time = now()
		WHERE environment_id = $1 AND id = $2 AND status NOT IN ('DELETING', 'DELETED')`, env, id, uid)
	return tag.RowsAffected() == 1, err
}

// setCapacity records an expansion while lease holds, and returns the
// time recorded.
func (r *repository) setCapacity(ctx context.Context, env, id, capacity string, lease membership.Lease) (time.Time, error) {
	var at time.Time
	err := r.db.QueryRow(ctx, `UPDATE volumes SET spec = jsonb_set(spec, '{capacity}', to_jsonb($3::text)), update_time = now()
		WHERE environment_id = $1 AND id = $2 AND `+membership.FenceSQL("environment_id", "$4", "$5")+` RETURNING update_time`,
		env, id, capacity, lease.Epoch, lease.Incarnation).Scan(&at)
	return at, err
}

// touch records that a volume changed now (its update_time) while lease
// holds, and returns the time recorded.
func (r *repository) touch(ctx context.Context, env, id string, lease membership.Lease) (time.Time, error) {
	var at time.Time
	err := r.db.QueryRow(ctx, `UPDATE volumes SET update_time = now()
		WHERE environment_id = $1 AND id = $2 AND `+membership.FenceSQL("environment_id", "$3", "$4")+` RETURNING update_time`,
		env, id, lease.Epoch, lease.Incarnation).Scan(&at)
	return at, err
}

// list returns live (not DELETED) records after id `after`, in id order.
func (r *repository) list(ctx context.Context, env, after string, limit int) ([]record, error) {
	rows, err := r.db.Query(ctx, `SELECT `+recordColumns+` FROM volumes
		WHERE environment_id = $1 AND status <> 'DELETED' AND id > $2 ORDER BY id LIMIT $3`, env, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (record, error) { return scanRecord(row) })
}

// listAll returns records of every environment matching q after
// (afterEnv, afterID), in that order.
func (r *repository) listAll(ctx context.Context, q AllQuery, afterEnv, afterID string, limit int) ([]record, error) {
	envs := q.Environments
	if envs == nil {
		envs = []string{}
	}
	rows, err := r.db.Query(ctx, `SELECT `+recordColumns+` FROM volumes
		WHERE (cardinality($1::text[]) = 0 OR environment_id = ANY($1))
		  AND CASE WHEN $2 = '' THEN status <> 'DELETED' ELSE status = $2 END
		  AND ($3 = '' OR storage_class = $3)
		  AND (environment_id, id) > ($4, $5)
		ORDER BY environment_id, id LIMIT $6`, envs, string(q.Status), q.StorageClass, afterEnv, afterID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (record, error) { return scanRecord(row) })
}

// live returns every record not yet DELETED, for the reconciler.
func (r *repository) live(ctx context.Context, env string) ([]record, error) {
	rows, err := r.db.Query(ctx, `SELECT `+recordColumns+` FROM volumes
		WHERE environment_id = $1 AND status <> 'DELETED'`, env)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (record, error) { return scanRecord(row) })
}

// installationID returns this installation's identity, drawn by the first
// caller (any replica) and the same for every one after it. A caller that
// lost the race to draw it reads it on its second try: its statement's
// snapshot predates the winner's row.
func (r *repository) installationID(ctx context.Context) (string, error) {
	var id string
	for range 2 {
		err := r.db.QueryRow(ctx, `WITH drawn AS (
				INSERT INTO installation (id) VALUES (gen_random_uuid()) ON CONFLICT (singleton) DO NOTHING RETURNING id)
			SELECT id::text FROM drawn UNION ALL SELECT id::text FROM installation LIMIT 1`).Scan(&id)
		if !errors.Is(err, pgx.ErrNoRows) {
			return id, err
		}
	}
	return "", errors.New("the installation's identity could not be drawn")
}
