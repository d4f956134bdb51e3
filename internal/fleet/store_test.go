package fleet

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/clusters/clusterstest"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/fleet/fleettest"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/registrytest"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// migrated returns a fresh, migrated database holding environment rows for
// ids (just what the foreign key needs), and a replica that owns them.
func migrated(t *testing.T, ids ...string) (*pgxpool.Pool, *membership.Membership) {
	t.Helper()
	reg := registrytest.New(t, registrytest.Options{})
	for _, id := range ids {
		reg.InsertEnvironment(t, id)
	}
	m := reg.Member(t, "replica-1")
	registrytest.Own(t, m, ids...)
	return reg.DB, m
}

// registry is a fake of the registry the feed follows: READY
// environments by id, whose changes it publishes (the registry's rows are
// not the point here).
type registry struct {
	mu    sync.Mutex
	envs  map[string]environments.Environment
	topic changes.Topic[environments.Change]
	gets  atomic.Int32 // rows read one at a time
}

func newRegistry(ids ...string) *registry {
	r := &registry{envs: map[string]environments.Environment{}}
	for _, id := range ids {
		r.envs[id] = environments.Environment{ID: id, Status: environments.Status{State: environments.StateReady}}
	}
	return r
}

func (r *registry) Each(_ context.Context, fn func(environments.Environment) error) error {
	r.mu.Lock()
	envs := slices.Collect(maps.Values(r.envs))
	r.mu.Unlock()
	for _, e := range envs {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (r *registry) IDs(context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.envs)), nil
}

func (r *registry) Get(_ context.Context, id string) (environments.Environment, error) {
	r.gets.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.envs[id]
	if !ok {
		return e, fault.New(fault.NotFound, "environment %q not found", id)
	}
	return e, nil
}

// set stores e (nil: deletes id) and publishes the change.
func (r *registry) set(id string, e *environments.Environment) {
	r.mu.Lock()
	if e == nil {
		delete(r.envs, id)
	} else {
		r.envs[id] = *e
	}
	r.mu.Unlock()
	r.topic.Publish(environments.Change{EnvironmentID: id, Deleted: e == nil})
}

func (r *registry) Subscribe() *changes.Subscription[environments.Change] { return r.topic.Subscribe() }

func newFeed(db *pgxpool.Pool, owned membership.Ownership, ids ...string) *Feed {
	return newFeedLogging(db, owned, slog.New(slog.DiscardHandler), ids...)
}

func newFeedLogging(db *pgxpool.Pool, owned membership.Ownership, logger *slog.Logger, ids ...string) *Feed {
	return NewFeed(FeedOptions{Index: NewIndex(), Clusters: clusters.NewPool(clusters.PoolOptions{}), Registry: newRegistry(ids...),
		Store: Store{DB: db}, Owned: owned, Logger: logger})
}

// What one gateway learned, the next one shows after a restart: stale, dated
// when it was observed, and without secret-looking parameters in the row.
func TestSnapshotsSurviveARestart(t *testing.T) {
	ctx := context.Background()
	db, owner := migrated(t, "east", "west")
	first := newFeed(db, owner, "east", "west")
	if err := first.Load(ctx); err != nil {
		t.Fatal(err)
	}
	observed := time.Now().Add(-time.Hour).Truncate(time.Microsecond) // Postgres keeps microseconds
	if !first.opts.Index.Observe("east", fleettest.Objects(3, 10), observed) {
		t.Fatal("first observation reported no change")
	}
	first.unsaved["east"] = true
	first.persistAll(ctx)
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

	second := newFeed(db, owner, "east", "west")
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
	db, owner := migrated(t, "good", "bad")
	lease, err := owner.Lease("good")
	if err != nil {
		t.Fatal(err)
	}
	if saved, err := (Store{DB: db}).save(ctx, "good", snapshot{objects: fleettest.Objects(2, 1), observed: time.Now()}, lease); err != nil || !saved {
		t.Fatalf("save = %v, %v", saved, err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO fleet_snapshots (environment_id, objects, observed_time) VALUES ('bad', '{"classes": 5}', now())`); err != nil {
		t.Fatal(err)
	}
	f := newFeed(db, owner, "good", "bad")
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

// Saving an environment deleted meanwhile (so no longer owned) is not an
// error, and a database that does not answer stops the flush at the first
// failure, within storeTimeout, keeping the rest queued.
func TestPersistence(t *testing.T) {
	ctx := context.Background()
	db, owner := migrated(t, "kept")
	logs := &syncbuf.Buffer{}
	f := newFeedLogging(db, owner, slog.New(slog.NewTextHandler(logs, nil)), "kept", "deleted")
	if err := f.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"kept", "deleted"} {
		f.opts.Index.Observe(id, fleettest.Objects(1, 1), time.Now())
		f.unsaved[id] = true
	}
	f.persistAll(ctx)
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
	f.persistAll(ctx)
	if !f.unsaved["kept"] {
		t.Fatalf("a failed flush dropped work: %v", f.unsaved)
	}
	if took := time.Since(start); took > 2*storeTimeout {
		t.Fatalf("a flush against a locked table took %s (bound %s)", took, storeTimeout)
	}
	if n := strings.Count(logs.String(), "persist environments' classes"); n != 1 {
		t.Fatalf("%d failures logged, want the flush to stop at the first:\n%s", n, logs)
	}
}

// ownerAndOther returns two replicas' feeds over one database holding
// east, both loaded: first's membership (returned) owns east, second's
// owns nothing (it never joined).
func ownerAndOther(t *testing.T) (*pgxpool.Pool, *membership.Membership, *Feed, *Feed) {
	t.Helper()
	db, owner := migrated(t, "east")
	other := membership.New(membership.Options{DB: db, ID: "replica-2", Lease: 20 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	first, second := newFeed(db, owner, "east"), newFeed(db, other, "east")
	for _, f := range []*Feed{first, second} {
		if err := f.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return db, owner, first, second
}

// Every replica shows what the owner's view shows: another replica reads
// the owner's snapshot — live and dated as the owner has it, then stale from
// the moment the owner lost the cluster — and reads only rows that moved.
// Once the owner left, its late writes are refused by the fence.
func TestOtherReplicasShowTheOwnersView(t *testing.T) {
	ctx := context.Background()
	db, owner, first, second := ownerAndOther(t)
	observed := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	first.opts.Index.Observe("east", fleettest.Objects(3, 10), observed)
	first.opts.Index.SetWritable("east", true)
	first.unsaved["east"] = true
	first.persistAll(ctx)
	second.replicate(ctx)
	// Both place a volume the same: east, which takes writes, offers its 3 classes.
	for name, f := range map[string]*Feed{"owner": first, "other": second} {
		if p, err := f.opts.Index.Place(Request{CapacityBytes: 1 << 30}); err != nil || p.Candidates() != 3 {
			t.Fatalf("the %s replica places on %d classes (%v); want east's 3", name, p.Candidates(), err)
		}
	}
	east, _ := second.opts.Index.Environment("east")
	if east.Stale || !east.ObservedTime.Equal(observed) || len(east.Classes) != 3 {
		t.Fatalf("the other replica shows %+v; want live, observed %s, 3 classes", east, observed)
	}
	ownerView, _ := first.opts.Index.Environment("east")
	if !reflect.DeepEqual(ownerView, east) {
		t.Fatalf("views differ:\nowner %+v\nother %+v", ownerView, east)
	}

	// The owner's pool does not hold east: the refresh marks it stale.
	first.refresh("east")
	first.persistAll(ctx)
	lost, _ := first.opts.Index.Environment("east")
	second.replicate(ctx)
	east, _ = second.opts.Index.Environment("east")
	if !east.Stale || !east.ObservedTime.Equal(lost.ObservedTime) || len(east.Classes) != 3 {
		t.Fatalf("after the owner lost the cluster the other replica shows %+v; want stale since %s", east, lost.ObservedTime)
	}
	if p, _ := second.opts.Index.Place(Request{CapacityBytes: 1 << 30}); p.Candidates() != 0 {
		t.Fatalf("the other replica still places on east after its owner lost it")
	}
	seen := maps.Clone(second.replicated)
	second.replicate(ctx)
	if !maps.Equal(seen, second.replicated) || seen["east"] < 2 {
		t.Fatalf("revisions read %v, then %v", seen, second.replicated)
	}

	lease, err := owner.Lease("east")
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if saved, err := (Store{DB: db}).save(ctx, "east", snapshot{objects: fleettest.Objects(1, 1), live: true, observed: time.Now()}, lease); err != nil || saved {
		t.Fatalf("a save after the owner left: saved %v, %v", saved, err)
	}
	second.replicate(ctx)
	if after, _ := second.opts.Index.Environment("east"); len(after.Classes) != 3 || !after.Stale {
		t.Fatalf("a refused save shows: %+v", after)
	}
}

// TestReplicasReadWhatMovedAndWhatTheyAreTold: another replica's read
// finds a snapshot written by a transaction that was still open at its
// previous read, skips snapshots no one wrote since, and reads one it is
// told to (an environment it lost or newly holds) whatever its revision.
func TestReplicasReadWhatMovedAndWhatTheyAreTold(t *testing.T) {
	ctx := context.Background()
	db, _, first, second := ownerAndOther(t)
	first.opts.Index.Observe("east", fleettest.Objects(3, 10), time.Now())
	first.unsaved["east"] = true
	first.persistAll(ctx)
	second.replicate(ctx)
	if east, _ := second.opts.Index.Environment("east"); east.Stale {
		t.Fatalf("the other replica shows %+v; want the owner's live view", east)
	}

	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := tx.Exec(ctx, `UPDATE fleet_snapshots SET live = false, revision = revision + 1 WHERE environment_id = 'east'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil { // a later transaction ends first
		t.Fatal(err)
	}
	second.replicate(ctx)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	second.replicate(ctx)
	if east, _ := second.opts.Index.Environment("east"); !east.Stale {
		t.Fatalf("a snapshot committed after a read is not shown: %+v", east)
	}

	// The index shows something else (as its own view did, when it owned
	// east): a read without writes leaves it, a read it is told to mends it.
	second.opts.Index.Replicate("east", fleettest.Objects(1, 1), true, true, time.Now())
	second.replicate(ctx)
	if east, _ := second.opts.Index.Environment("east"); east.Stale || len(east.Classes) != 1 {
		t.Fatalf("a snapshot no one wrote was read again: %+v", east)
	}
	second.replicateNext("east")
	second.replicate(ctx)
	if east, _ := second.opts.Index.Environment("east"); !east.Stale || len(east.Classes) != 3 {
		t.Fatalf("after replicateNext the other replica shows %+v; want the persisted stale view with 3 classes", east)
	}
}

// TestReplicasReadNothingTwice: a replica's first read after its start
// does not read again the snapshots its start read (it shows those, as
// they were then), it does not decode the snapshots it owns, and a read
// with nothing written since the last returns no row.
func TestReplicasReadNothingTwice(t *testing.T) {
	ctx := context.Background()
	db, owner := migrated(t, "east")
	var logs bytes.Buffer
	first := newFeedLogging(db, owner, slog.New(slog.NewTextHandler(&logs, nil)), "east")
	if err := first.Load(ctx); err != nil {
		t.Fatal(err)
	}
	first.opts.Index.Observe("east", fleettest.Objects(3, 10), time.Now())
	first.unsaved["east"] = true
	first.persistAll(ctx)
	// A read takes as its horizon the oldest transaction open anywhere on
	// the server, so while another test's transaction that began before
	// the snapshot was written stays open, every read returns the snapshot
	// again (as it must). The start reads once those have ended.
	poll.Until(t, 30*time.Second, "no transaction older than the snapshot open on the server", func() bool {
		var past bool
		err := db.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > max(written_xid) FROM fleet_snapshots`).Scan(&past)
		return err == nil && past
	})

	other := membership.New(membership.Options{DB: db, ID: "replica-2", Lease: 20 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	second := newFeed(db, other, "east")
	if err := second.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// Other classes under the same revision: a read of every row would show them.
	if _, err := db.Exec(ctx, `UPDATE fleet_snapshots SET objects = $1`, fleettest.Objects(1, 1)); err != nil {
		t.Fatal(err)
	}
	second.replicate(ctx)
	if east, _ := second.opts.Index.Environment("east"); east.Stale || len(east.Classes) != 3 {
		t.Fatalf("the first read after a start shows %+v; want what the start read, live with 3 classes", east)
	}
	second.mu.Lock()
	horizon := second.horizon
	second.mu.Unlock()
	if rows, _, _, err := (Store{DB: db}).written(ctx, horizon, nil); err != nil || len(rows) != 0 {
		t.Fatalf("a read with nothing written since: %d rows, %v", len(rows), err)
	}

	// A new revision of the owner's own snapshot that does not decode: the
	// owner reads it, but leaves it alone.
	if _, err := db.Exec(ctx, `UPDATE fleet_snapshots SET objects = '{"classes": 5}', revision = revision + 1`); err != nil {
		t.Fatal(err)
	}
	first.replicate(ctx)
	if strings.Contains(logs.String(), "do not decode") {
		t.Fatalf("the owner decoded its own snapshot:\n%s", logs.String())
	}
}

// TestTheFeedFollowsTheRegistry: run against a fake registry, the feed's
// reconciler adds a registered environment, applies its changed settings
// and drops a deleted one, each on the registry's notice alone; an owned
// environment shown live whose cluster the pool does not hold is shown
// stale, and its snapshot persisted for the other replicas.
func TestTheFeedFollowsTheRegistry(t *testing.T) {
	db, owner := migrated(t, "east", "west")
	reg := newRegistry("east")
	f := NewFeed(FeedOptions{Index: NewIndex(), Clusters: clusters.NewPool(clusters.PoolOptions{}), Registry: reg,
		Store: Store{DB: db}, Owned: owner, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	if err := f.Load(ctx); err != nil {
		t.Fatal(err)
	}
	f.opts.Index.Observe("east", fleettest.Objects(2, 1), time.Now())
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	// shows waits until west's entry satisfies ok (nil: not in the index).
	shows := func(what string, ok func(e *entry) bool) {
		t.Helper()
		poll.Until(t, 5*time.Second, what, func() bool {
			f.opts.Index.mu.RLock()
			defer f.opts.Index.mu.RUnlock()
			return ok(f.opts.Index.envs["west"])
		})
	}

	reg.set("west", &environments.Environment{ID: "west", Spec: environments.Spec{Region: "eu"}, Status: environments.Status{State: environments.StateReady}})
	shows("the registered environment in the index, stale", func(e *entry) bool { return e != nil && !e.fresh && e.meta.Region == "eu" })
	poll.Until(t, 5*time.Second, "east's snapshot persisted stale", func() bool {
		var live bool
		return db.QueryRow(ctx, `SELECT live FROM fleet_snapshots WHERE environment_id = 'east'`).Scan(&live) == nil && !live
	})
	reg.set("west", &environments.Environment{ID: "west", Spec: environments.Spec{Region: "us"}, Status: environments.Status{State: environments.StateReady}})
	shows("the changed region", func(e *entry) bool { return e != nil && e.meta.Region == "us" })
	reg.set("west", nil)
	shows("the deleted environment gone", func(e *entry) bool { return e == nil })
	if _, ok := f.opts.Index.Environment("east"); !ok {
		t.Fatal("east, registered before the feed started, is not in the index")
	}
}

// liveClusters is a fake pool: fake live clusters by environment, whose
// changes it publishes.
type liveClusters struct {
	mu    sync.Mutex
	live  map[string]clusters.Live
	topic changes.Topic[clusters.Change]
}

func (l *liveClusters) Live(id string) (clusters.Live, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.live[id]
	return c, ok
}

func (l *liveClusters) Subscribe() *changes.Subscription[clusters.Change] { return l.topic.Subscribe() }

// TestTheFeedShowsWhatAnOwnedClusterHolds: the feed shows an owned
// environment's classes as its live cluster holds them, writable while the
// cluster is ready, and stale from the moment its cluster says it is
// unreachable; each persisted for the other replicas.
func TestTheFeedShowsWhatAnOwnedClusterHolds(t *testing.T) {
	db, owner := migrated(t, "east")
	fake := clusterstest.New(
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
			Provisioner: "ebs.csi.aws.com"},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "slow"}, Provisioner: "ebs.csi.aws.com"})
	pool := &liveClusters{live: map[string]clusters.Live{"east": fake}}
	reg := newRegistry("east")
	f := NewFeed(FeedOptions{Index: NewIndex(), Clusters: pool, Registry: reg, Store: Store{DB: db}, Owned: owner,
		Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	persisted := func() (live, writable bool) {
		_ = db.QueryRow(ctx, `SELECT live, writable FROM fleet_snapshots WHERE environment_id = 'east'`).Scan(&live, &writable)
		return live, writable
	}

	poll.Until(t, 5*time.Second, "east's two classes shown live and persisted", func() bool {
		east, _ := f.opts.Index.Environment("east")
		live, writable := persisted()
		return !east.Stale && len(east.Classes) == 2 && live && writable
	})
	if p, err := f.opts.Index.Place(Request{CapacityBytes: 1 << 30}); err != nil || p.Candidates() != 2 {
		t.Fatalf("a ready cluster's classes place %d candidates (%v), want 2", p.Candidates(), err)
	}

	readBefore := reg.gets.Load()
	fake.SetHealth(clusters.Health{State: clusters.HealthUnreachable, Message: "no answer"})
	pool.topic.Publish(clusters.Change{Kind: clusters.HealthChanged, EnvironmentID: "east"})
	poll.Until(t, 5*time.Second, "east shown stale and persisted so", func() bool {
		east, _ := f.opts.Index.Environment("east")
		live, _ := persisted()
		return east.Stale && len(east.Classes) == 2 && !live
	})
	if n := reg.gets.Load() - readBefore; n != 0 {
		t.Errorf("a cluster change read the registry %d times; its row did not change", n)
	}
}
