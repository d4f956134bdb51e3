package environments_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// TestTheWatchHearsOtherReplicasChanges: a registry that only watches the
// database (a second replica) hears every registration, update, state
// change and deletion made through another within one interval, the
// deletion with the DCM provider it was registered as, and nothing for a
// write that changed none of what it follows.
// watched runs a second registry's watch (every 100 ms) on reg's
// database, and returns what waits for its next change and what asserts
// that none comes.
func watched(t *testing.T, reg *registrytest.Fixture) (next func(what string) environments.Change, quiet func(what string)) {
	t.Helper()
	return watchedBy(t, reg.NewRegistry(t, registrytest.Options{}))
}

// watchedBy is watched with the watch of registry other: what it publishes,
// changes it made itself included.
func watchedBy(t *testing.T, other *environments.Service) (next func(what string) environments.Change, quiet func(what string)) {
	t.Helper()
	heard := make(chan environments.Change, 16)
	sub := other.Subscribe()
	watchCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { other.Watch(watchCtx, 100*time.Millisecond) })
	wg.Go(func() { sub.Run(watchCtx, func(_ context.Context, c environments.Change) { heard <- c }) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	next = func(what string) environments.Change {
		t.Helper()
		select {
		case c := <-heard:
			return c
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: not heard within 2 s (the watch reads every 100 ms)", what)
			return environments.Change{}
		}
	}
	quiet = func(what string) {
		t.Helper()
		select {
		case c := <-heard:
			t.Fatalf("%s: heard %+v", what, c)
		case <-time.After(500 * time.Millisecond):
		}
	}
	return next, quiet
}

func TestTheWatchHearsOtherReplicasChanges(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	next, quiet := watched(t, reg)
	quiet("before any change") // meanwhile the first read learned the rows

	if _, _, err := reg.Registry.Register(ctx, registration(t, "watched")); err != nil {
		t.Fatal(err)
	}
	if c := next("registration"); c != (environments.Change{EnvironmentID: "watched", Registered: true}) {
		t.Fatalf("registration heard as %+v", c)
	}
	if _, err := reg.Registry.Update(ctx, "watched", []byte(`{"labels":{"site":"west"}}`)); err != nil {
		t.Fatal(err)
	}
	if c := next("update"); c != (environments.Change{EnvironmentID: "watched"}) {
		t.Fatalf("update heard as %+v", c)
	}
	if _, err := reg.DB.Exec(ctx, `UPDATE environments SET last_probe_time = now() WHERE id = 'watched'`); err != nil {
		t.Fatal(err)
	}
	quiet("a write the followers do not care about")
	if _, err := reg.DB.Exec(ctx, `UPDATE environments SET state = 'UNREACHABLE' WHERE id = 'watched'`); err != nil {
		t.Fatal(err)
	}
	if c := next("state change"); c != (environments.Change{EnvironmentID: "watched"}) {
		t.Fatalf("state change heard as %+v", c)
	}
	if _, err := reg.DB.Exec(ctx, `UPDATE environments SET dcm_registration = '{"state":"REGISTERED","provider_id":"p-1"}' WHERE id = 'watched'`); err != nil {
		t.Fatal(err)
	}
	quiet("a DCM registration recorded") // and read by the watch
	if err := reg.Registry.Delete(ctx, "watched", false); err != nil {
		t.Fatal(err)
	}
	if c, want := next("deletion"), (environments.Change{EnvironmentID: "watched", Deleted: true, DCMProviderID: "p-1"}); c != want {
		t.Fatalf("deletion heard as %+v, want %+v", c, want)
	}
	quiet("after the deletion")
}

// TestTheWatchHearsLateCommits: a write whose transaction began before a
// read of the watch and commits after it is heard all the same (reads
// start at the oldest transaction still running, not at the newest), and
// a deletion is heard when a registration in the same interval keeps the
// number of rows.
func TestTheWatchHearsLateCommits(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	if _, _, err := reg.Registry.Register(ctx, registration(t, "slow")); err != nil {
		t.Fatal(err)
	}
	next, quiet := watched(t, reg)
	quiet("before any change")

	tx, err := reg.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := tx.Exec(ctx, `UPDATE environments SET state = 'UNREACHABLE' WHERE id = 'slow'`); err != nil {
		t.Fatal(err)
	}
	// Later transactions take ids and end meanwhile: the watch's horizon
	// would pass the open one if it followed the newest.
	for range 3 {
		if _, err := reg.DB.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
			t.Fatal(err)
		}
	}
	quiet("an uncommitted change") // the watch read about five times
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if c := next("a change committed after several reads"); c != (environments.Change{EnvironmentID: "slow"}) {
		t.Fatalf("late commit heard as %+v", c)
	}

	// Deleted and another registered between two reads: as many rows as before.
	if err := reg.Registry.Delete(ctx, "slow", false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.Registry.Register(ctx, registration(t, "quick")); err != nil {
		t.Fatal(err)
	}
	heard := map[environments.Change]bool{next("first of two changes"): true, next("second of two changes"): true}
	want := map[environments.Change]bool{{EnvironmentID: "slow", Deleted: true}: true, {EnvironmentID: "quick", Registered: true}: true}
	if !maps.Equal(heard, want) {
		t.Fatalf("heard %v, want %v", heard, want)
	}
	quiet("after both")
}

// TestTheWatchDoesNotRepeatARegistrationMadeHere: a registration made
// through the replica whose watch reads it is published once, at once, and
// not again when the watch reads the row (every follower would read the
// row again); a later change of that row is heard as from anywhere else.
func TestTheWatchDoesNotRepeatARegistrationMadeHere(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	next, quiet := watchedBy(t, reg.Registry)
	quiet("before any change")

	if _, _, err := reg.Registry.Register(ctx, registration(t, "here")); err != nil {
		t.Fatal(err)
	}
	if c := next("registration"); c != (environments.Change{EnvironmentID: "here", Registered: true}) {
		t.Fatalf("registration heard as %+v", c)
	}
	quiet("the watch reading the registration") // about five reads
	if _, err := reg.DB.Exec(ctx, `UPDATE environments SET state = 'UNREACHABLE' WHERE id = 'here'`); err != nil {
		t.Fatal(err)
	}
	if c := next("state change"); c != (environments.Change{EnvironmentID: "here"}) {
		t.Fatalf("state change heard as %+v", c)
	}
}
