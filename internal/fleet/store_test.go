package fleet

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fleet/fleettest"
	"github.com/dcm-project/storage-gateway/test/registrytest"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// migrated returns a pool on a fresh, migrated database holding environment
// rows for ids (just what the foreign key needs).
func migrated(t *testing.T, ids ...string) *pgxpool.Pool {
	t.Helper()
	reg := registrytest.New(t, registrytest.Options{})
	for _, id := range ids {
		reg.InsertEnvironment(t, id)
	}
	return reg.DB
}

// registry lists fixed environments (the registry's rows are not the point
// here).
type registry []string

func (r registry) Each(_ context.Context, fn func(environments.Environment) error) error {
	for _, id := range r {
		if err := fn(environments.Environment{ID: id}); err != nil {
			return err
		}
	}
	return nil
}

func (r registry) Subscribe() *changes.Subscription[environments.Change] {
	return new(changes.Topic[environments.Change]).Subscribe()
}

func newFeed(db *pgxpool.Pool, ids ...string) *Feed {
	return newFeedLogging(db, slog.New(slog.DiscardHandler), ids...)
}

func newFeedLogging(db *pgxpool.Pool, logger *slog.Logger, ids ...string) *Feed {
	return NewFeed(FeedOptions{Index: NewIndex(), Clusters: clusters.NewPool(clusters.PoolOptions{}), Registry: registry(ids),
		Store: Store{DB: db}, Logger: logger})
}

// What one gateway learned, the next one shows after a restart: stale, dated
// when it was observed, and without secret-looking parameters in the row.
func TestSnapshotsSurviveARestart(t *testing.T) {
	ctx := context.Background()
	db := migrated(t, "east", "west")
	first := newFeed(db, "east", "west")
	if err := first.Load(ctx); err != nil {
		t.Fatal(err)
	}
	observed := time.Now().Add(-time.Hour).Truncate(time.Microsecond) // Postgres keeps microseconds
	if !first.opts.Index.Observe("east", fleettest.Objects(3, 10), observed) {
		t.Fatal("first observation reported no change")
	}
	first.unsaved["east"] = true
	first.persist(ctx)
	if len(first.unsaved) != 0 {
		t.Fatalf("still unsaved: %v", first.unsaved)
	}
	var row string
	if err := db.QueryRow(ctx, `SELECT objects::text FROM fleet_snapshots WHERE environment_id = 'east'`).Scan(&row); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(row, "provisioner-secret") {
		t.Fatalf("the persisted row holds a secret-looking parameter: %s", row)
	}

	second := newFeed(db, "east", "west")
	if err := second.Load(ctx); err != nil {
		t.Fatal(err)
	}
	east, _ := second.opts.Index.Environment("east")
	if !east.Stale || !east.ObservedTime.Equal(observed) || len(east.Classes) != 3 || east.Classes[0].Capacity == nil {
		t.Fatalf("after the restart east = %+v (observed %s)", east, observed)
	}
	if west, _ := second.opts.Index.Environment("west"); len(west.Classes) != 0 || !west.Stale {
		t.Fatalf("west was never observed but shows %+v", west)
	}
}

// A row that does not decode is skipped; it hides neither the other rows nor
// the index.
func TestUnreadableSnapshotIsSkipped(t *testing.T) {
	ctx := context.Background()
	db := migrated(t, "good", "bad")
	if err := (Store{DB: db}).save(ctx, "good", fleettest.Objects(2, 1), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO fleet_snapshots VALUES ('bad', '{"classes": 5}', now())`); err != nil {
		t.Fatal(err)
	}
	f := newFeed(db, "good", "bad")
	if err := f.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if good, _ := f.opts.Index.Environment("good"); len(good.Classes) != 2 {
		t.Fatalf("good = %+v", good)
	}
	if bad, ok := f.opts.Index.Environment("bad"); !ok || len(bad.Classes) != 0 {
		t.Fatalf("bad = %+v, %v", bad, ok)
	}
}

// Saving an environment deleted meanwhile is not an error, and a database
// that does not answer stops the flush at the first failure, within
// storeTimeout, keeping the rest queued.
func TestPersistence(t *testing.T) {
	ctx := context.Background()
	db := migrated(t, "kept")
	logs := &syncbuf.Buffer{}
	f := newFeedLogging(db, slog.New(slog.NewTextHandler(logs, nil)), "kept", "deleted")
	if err := f.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"kept", "deleted"} {
		f.opts.Index.Observe(id, fleettest.Objects(1, 1), time.Now())
		f.unsaved[id] = true
	}
	f.persist(ctx)
	if len(f.unsaved) != 0 {
		t.Fatalf("unsaved after a flush: %v", f.unsaved)
	}

	// Another session holds the table: every write waits.
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE fleet_snapshots IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { storeTimeout = d }(storeTimeout)
	storeTimeout = 300 * time.Millisecond
	f.opts.Index.Observe("kept", fleettest.Objects(2, 1), time.Now())
	f.unsaved["kept"], f.unsaved["deleted"] = true, true
	start := time.Now()
	f.persist(ctx)
	if len(f.unsaved) != 2 {
		t.Fatalf("a failed flush dropped work: %v", f.unsaved)
	}
	if took := time.Since(start); took > 2*storeTimeout {
		t.Fatalf("a flush against a locked table took %s (bound %s)", took, storeTimeout)
	}
	if n := strings.Count(logs.String(), "persist environments' classes"); n != 1 {
		t.Fatalf("%d failures logged, want the flush to stop at the first:\n%s", n, logs)
	}
}
