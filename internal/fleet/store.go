package fleet

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/postgres"
)

// Store persists each environment's last known storage objects
// (fleet_snapshots), already slimmed: no secret-looking parameters reach the
// database. The environment's owner writes its row, fenced by its claim;
// every replica reads every row.
type Store struct{ DB *pgxpool.Pool }

// snapshot is one persisted environment: its objects, and its view's
// freshness and date as the owner's index shows them.
type snapshot struct {
	objects capabilities.Objects
	live    bool
	// writable says the owner's connection took writes (READY, every
	// cache synced): placement offers only such environments.
	writable bool
	observed time.Time
	// seen is the last time the owner saw the objects current.
	seen     time.Time
	revision int64
}

// snapshotColumns are what a read of snapshots selects, in the order
// snapshotRows scans them.
const snapshotColumns = `environment_id, objects, live, writable, observed_time, seen_time, revision`

// snapshotRows decodes rows of snapshotColumns by environment id, and
// keeps the ids of rows that do not decode (skipped: one bad row must not
// hide the rest). Rows skip says the reader has no use for are not
// decoded.
type snapshotRows struct {
	skip       func(id string, revision int64) bool
	out        map[string]snapshot
	unreadable []string
	id         string
	raw        []byte
	snap       snapshot
}

func newSnapshotRows(skip func(id string, revision int64) bool) *snapshotRows {
	if skip == nil {
		skip = func(string, int64) bool { return false }
	}
	return &snapshotRows{skip: skip, out: map[string]snapshot{}}
}

func (r *snapshotRows) dest() []any {
	return []any{&r.id, &r.raw, &r.snap.live, &r.snap.writable, &r.snap.observed, &r.snap.seen, &r.snap.revision}
}

func (r *snapshotRows) each() error {
	if r.skip(r.id, r.snap.revision) {
		return nil
	}
	read := r.snap
	read.objects = capabilities.Objects{}
	if json.Unmarshal(r.raw, &read.objects) != nil {
		r.unreadable = append(r.unreadable, r.id)
		return nil
	}
	r.out[r.id] = read
	return nil
}

// load returns the persisted snapshots of ids by environment id, and the
// ids of rows that do not decode.
func (s Store) load(ctx context.Context, ids []string) (map[string]snapshot, []string, error) {
	rows, err := s.DB.Query(ctx, `SELECT `+snapshotColumns+` FROM fleet_snapshots WHERE environment_id = ANY($1)`, ids)
	if err != nil {
		return nil, nil, err
	}
	r := newSnapshotRows(nil)
	_, err = pgx.ForEachRow(rows, r.dest(), r.each)
	return r.out, r.unreadable, err
}

// written returns the snapshots whose revision moved since horizon since
// (every one when it is 0; see postgres.ReadWritten) but those skip
// names, the ids of rows that do not decode, and the horizon of the next
// read.
func (s Store) written(ctx context.Context, since int64, skip func(id string, revision int64) bool) (map[string]snapshot, []string, int64, error) {
	r := newSnapshotRows(skip)
	horizon, err := postgres.ReadWritten(ctx, s.DB, since,
		`SELECT `+snapshotColumns+` FROM fleet_snapshots WHERE `+postgres.WrittenSince, r.dest(), r.each, "")
	return r.out, r.unreadable, horizon, err
}

// save writes an environment's snapshot as its owner's view shows it, while
// claim is current, and moves its revision; an environment deleted
// meanwhile, or handed over, is skipped (saved reports whether it was
// written).
func (s Store) save(ctx context.Context, id string, snap snapshot, lease membership.Lease) (saved bool, err error) {
	raw, err := json.Marshal(snap.objects)
	if err != nil {
		return false, err
	}
	tag, err := s.DB.Exec(ctx, `
		INSERT INTO fleet_snapshots (environment_id, objects, live, observed_time, seen_time, writable)
		SELECT $1, $2, $3, $4, $4, $7 WHERE `+membership.FenceSQL("$1", "$5", "$6")+`
		ON CONFLICT (environment_id) DO UPDATE SET objects = EXCLUDED.objects, live = EXCLUDED.live, writable = EXCLUDED.writable,
			observed_time = EXCLUDED.observed_time, seen_time = greatest(fleet_snapshots.seen_time, EXCLUDED.seen_time),
			revision = fleet_snapshots.revision + 1`,
		id, raw, snap.live, snap.observed, lease.Epoch, lease.Incarnation, snap.writable)
	if postgres.ErrorCode(err) == pgerrcode.ForeignKeyViolation {
		return false, nil
	}
	return tag.RowsAffected() == 1, err
}

// heldSnapshot is an environment whose snapshot its owner re-dates, and
// the claim it holds.
type heldSnapshot struct {
	id    string
	lease membership.Lease
}

// touch records that these environments' snapshots were still current at
// `at`, so after a restart a dead cluster's data is dated by when it was
// last seen, not when it last changed. A row is re-dated only if its owner
// row still names the claim (read, not locked: a re-dating that races a
// hand-over is harmless, the new owner re-dates it too); what other
// replicas show does not move (the revision stays).
func (s Store) touch(ctx context.Context, held []heldSnapshot, at time.Time) error {
	ids, epochs := make([]string, len(held)), make([]int64, len(held))
	for i, h := range held {
		ids[i], epochs[i] = h.id, h.lease.Epoch
	}
	_, err := s.DB.Exec(ctx, `UPDATE fleet_snapshots f SET seen_time = $2
		FROM unnest($1::text[], $3::bigint[]) AS held (environment_id, epoch), environment_owners o
		WHERE f.environment_id = held.environment_id AND f.seen_time < $2
		  AND o.environment_id = held.environment_id AND o.epoch = held.epoch AND o.incarnation = $4`,
		ids, at, epochs, held[0].lease.Incarnation)
	return err
}
