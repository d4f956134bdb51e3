package environments_test

import (
	"context"
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
func TestTheWatchHearsOtherReplicasChanges(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	other := reg.NewRegistry(t, registrytest.Options{})
	heard := make(chan environments.Change, 16)
	sub := other.Subscribe()
	watchCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { other.Watch(watchCtx, 100*time.Millisecond) })
	wg.Go(func() { sub.Run(watchCtx, func(_ context.Context, c environments.Change) { heard <- c }) })
	defer wg.Wait()
	defer cancel()
	next := func(what string) environments.Change {
		t.Helper()
		select {
		case c := <-heard:
			return c
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: not heard within 2 s (the watch reads every 100 ms)", what)
			return environments.Change{}
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case c := <-heard:
			t.Fatalf("%s: heard %+v", what, c)
		case <-time.After(500 * time.Millisecond):
		}
	}
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
