package environments

import (
	"context"
	"sync"
	"time"

	"github.com/dcm-project/storage-gateway/internal/postgres"
)

// revision is what a registry notice follows in a row: its settings
// (generation), its credentials (a generation unique across every row ever
// sealed, so a row deleted and registered again under the same id differs)
// and its state (written by its owner's probes).
type revision struct {
	generation, credentials int64
	state                   string
}

// revision is the revision of the row rec was read or written as.
func (rec record) revision() revision {
	return revision{generation: rec.generation, credentials: rec.sealed.Generation, state: string(rec.Status.State)}
}

// watchedRow is a row as the watch last read it.
type watchedRow struct {
	revision
	providerID string // DCM's provider of the environment, for its deletion notice
}

// Watch is the registry's watch across replicas: every interval it reads
// the rows written since its last read and publishes a Change for every
// environment registered, updated, re-credentialed, moved to another state
// or deleted — whichever replica wrote it — so every part of every replica
// that follows the registry (Subscribe) hears of it within one interval;
// the replica that made a change publishes it at once as well, and a
// registration it published is not published again when read. The first
// read only learns the rows (the followers list them when they start). It
// runs until ctx ends.
//
// A read asks Postgres for the rows written since the last one
// (postgres.ReadWritten), so an idle registry of 10,000 environments costs
// an index lookup and a count, not 10,000 rows, per interval; a count
// below the rows known means deletions, and only then are the ids read.
func (s *Service) Watch(ctx context.Context, interval time.Duration) {
	w := watch{repo: s.repo, registered: &s.registered}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changes, err := w.read(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "watch the registry; retrying", "error", err)
			}
		default:
			s.watching.Store(true)
			for _, c := range changes {
				s.publish(c)
			}
		}
		t.Reset(interval)
	}
}

// Watching reports whether the registry's Watch has read the registry:
// changes made on other replicas are followed from then on.
func (s *Service) Watching() bool { return s.watching.Load() }

// watch is what the registry's Watch knows between reads.
type watch struct {
	repo repository
	// known is every row as last read; nil before the first read.
	known map[string]watchedRow
	// horizon is where the next read starts (postgres.ReadWritten).
	horizon int64
	// registered is Service.registered: rows this replica registered and
	// published already.
	registered *sync.Map
}

// publishedHere reports whether id's row at rev is a registration this
// replica published itself, and forgets what it registered either way:
// from now on the watch knows the row.
func (w *watch) publishedHere(id string, rev revision) bool {
	published, ok := w.registered.LoadAndDelete(id)
	return ok && published.(revision) == rev
}

// read reads the registry's rows written since the last read and returns
// their changes; the first read returns none. After an error nothing is
// changed: the next read starts from the same horizon.
func (w *watch) read(ctx context.Context) ([]Change, error) {
	written, total, horizon, err := w.repo.written(ctx, w.horizon)
	if err != nil {
		return nil, err
	}
	rows := len(w.known)
	for id := range written {
		if _, ok := w.known[id]; !ok {
			rows++
		}
	}
	var present map[string]bool
	if rows > total && w.known != nil { // some known rows are gone
		ids, err := w.repo.ids(ctx)
		if err != nil {
			return nil, err
		}
		present = make(map[string]bool, len(ids))
		for _, id := range ids {
			present[id] = true
		}
	}
	first := w.known == nil
	if first {
		w.known = make(map[string]watchedRow, len(written))
	}
	var out []Change
	for id, row := range written {
		prev, ok := w.known[id]
		if !w.publishedHere(id, row.revision) && !first && (!ok || prev.revision != row.revision) {
			out = append(out, Change{EnvironmentID: id, Registered: !ok})
		}
		w.known[id] = row
	}
	if present != nil {
		for id, row := range w.known {
			if !present[id] {
				w.registered.Delete(id)
				out = append(out, Change{EnvironmentID: id, Deleted: true, DCMProviderID: row.providerID})
				delete(w.known, id)
			}
		}
	}
	w.horizon = horizon
	return out, nil
}

// written reads the rows written since horizon since (every row when it
// is 0), the number of rows at the new horizon and that horizon.
func (r *repository) written(ctx context.Context, since int64) (map[string]watchedRow, int, int64, error) {
	out := map[string]watchedRow{}
	var total int
	var id string
	var row watchedRow
	horizon, err := postgres.ReadWritten(ctx, r.db, since, `SELECT id, generation, credentials_generation, state,
		COALESCE(dcm_registration->>'provider_id', '') FROM environments WHERE `+postgres.WrittenSince,
		[]any{&id, &row.generation, &row.credentials, &row.state, &row.providerID},
		func() error {
			out[id] = row
			return nil
		},
		`(SELECT count(*) FROM environments)`, &total)
	return out, total, horizon, err
}
