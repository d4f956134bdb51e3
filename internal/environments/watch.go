package environments

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// revision is what a registry notice follows in a row: its settings
// (generation), its credentials (a generation unique across every row ever
// sealed, so a row deleted and registered again under the same id differs)
// and its state (written by its owner's probes).
type revision struct {
	generation, credentials int64
	state                   string
}

// watchedRow is a row as the watch last read it.
type watchedRow struct {
	revision
	providerID string // DCM's provider of the environment, for its deletion notice
}

// Watch is the registry's watch across replicas: every interval it reads
// each row's revision and publishes a Change for every environment
// registered, updated, re-credentialed, moved to another state or deleted
// since its last read — whichever replica wrote it — so every part of every
// replica that follows the registry (Subscribe) hears of it within one
// interval; the replica that made a change publishes it at once as well.
// The first read only learns the rows (the followers list them when they
// start). It runs until ctx ends.
//
// The watch polls one narrow query rather than LISTEN/NOTIFY: a listening
// session does not survive a transaction-pooling PgBouncer, which the
// gateway supports, and a notice lost while reconnecting would be missed
// for good, where the next read finds every change.
func (s *Service) Watch(ctx context.Context, interval time.Duration) {
	var known map[string]watchedRow
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rows, err := s.repo.revisions(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "watch the registry; retrying", "error", err)
			}
		case known == nil:
			known = rows
			s.watching.Store(true)
		default:
			for _, c := range changed(known, rows) {
				s.changes.Publish(c)
			}
			known = rows
		}
		t.Reset(interval)
	}
}

// Watching reports whether the registry's Watch has read the registry:
// changes made on other replicas are followed from then on.
func (s *Service) Watching() bool { return s.watching.Load() }

// changed lists the changes between two reads of the registry.
func changed(before, after map[string]watchedRow) []Change {
	var out []Change
	for id, row := range after {
		if prev, ok := before[id]; !ok || prev.revision != row.revision {
			out = append(out, Change{EnvironmentID: id, Registered: !ok})
		}
	}
	for id, row := range before {
		if _, ok := after[id]; !ok {
			out = append(out, Change{EnvironmentID: id, Deleted: true, DCMProviderID: row.providerID})
		}
	}
	return out
}

// revisions reads every row's revision.
func (r *repository) revisions(ctx context.Context) (map[string]watchedRow, error) {
	rows, err := r.db.Query(ctx, `SELECT id, generation, credentials_generation, state,
		COALESCE(dcm_registration->>'provider_id', '') FROM environments`)
	if err != nil {
		return nil, err
	}
	out := map[string]watchedRow{}
	var id string
	var row watchedRow
	_, err = pgx.ForEachRow(rows, []any{&id, &row.generation, &row.credentials, &row.state, &row.providerID}, func() error {
		out[id] = row
		return nil
	})
	return out, err
}
