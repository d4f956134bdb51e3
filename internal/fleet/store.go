package fleet

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/postgres"
)

// Store persists each environment's last known storage objects
// (fleet_snapshots), already slimmed: no secret-looking parameters reach the
// database.
type Store struct{ DB *pgxpool.Pool }

// snapshot is one persisted environment.
type snapshot struct {
	objects  capabilities.Objects
	observed time.Time
}

// load returns every persisted snapshot by environment id, and the ids of
// rows that do not decode (skipped: one bad row must not hide the rest).
func (s Store) load(ctx context.Context) (map[string]snapshot, []string, error) {
	rows, err := s.DB.Query(ctx, `SELECT environment_id, objects, observed_time FROM fleet_snapshots`)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]snapshot{}
	var unreadable []string
	var id string
	var raw []byte
	var observed time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &raw, &observed}, func() error {
		snap := snapshot{observed: observed}
		if json.Unmarshal(raw, &snap.objects) != nil {
			unreadable = append(unreadable, id)
			return nil
		}
		out[id] = snap
		return nil
	})
	return out, unreadable, err
}

// save writes an environment's snapshot; an environment deleted meanwhile
// is skipped.
func (s Store) save(ctx context.Context, id string, objs capabilities.Objects, observed time.Time) error {
	raw, err := json.Marshal(objs)
	if err != nil {
		return err
	}
	_, err = s.DB.Exec(ctx, `
		INSERT INTO fleet_snapshots (environment_id, objects, observed_time) VALUES ($1, $2, $3)
		ON CONFLICT (environment_id) DO UPDATE SET objects = EXCLUDED.objects, observed_time = EXCLUDED.observed_time`,
		id, raw, observed)
	if postgres.ErrorCode(err) == pgerrcode.ForeignKeyViolation {
		return nil
	}
	return err
}

// touch records that these environments' snapshots were still current at
// `at`, so after a restart a dead cluster's data is dated by when it was
// last seen, not when it last changed.
func (s Store) touch(ctx context.Context, ids []string, at time.Time) error {
	_, err := s.DB.Exec(ctx, `UPDATE fleet_snapshots SET observed_time = $2
		WHERE environment_id = ANY($1) AND observed_time < $2`, ids, at)
	return err
}
