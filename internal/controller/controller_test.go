package controller_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/controller"
)

// calls records the reconciles of each key, and how many ran at once.
type calls struct {
	mu       sync.Mutex
	at       map[string][]time.Duration
	running  map[string]int
	overlap  bool
	inFlight int
	most     int
	start    time.Time
}

func newCalls() *calls {
	return &calls{at: map[string][]time.Duration{}, running: map[string]int{}, start: time.Now()}
}

func (c *calls) enter(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at[key] = append(c.at[key], time.Since(c.start))
	c.running[key]++
	c.overlap = c.overlap || c.running[key] > 1
	c.inFlight++
	c.most = max(c.most, c.inFlight)
}

func (c *calls) leave(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[key]--
	c.inFlight--
}

func (c *calls) of(key string) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.at[key])
}

// advance moves the bubble's fake clock on by d (no wall time passes) and
// waits until every goroutine in it is idle.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func run(t *testing.T, opts controller.Options, setup func(*controller.Controller)) (stop func()) {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	c := controller.New(opts)
	if setup != nil {
		setup(c)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	return func() { cancel(); <-done }
}

// The start-up listing and the sources name keys; a key named again while it
// waits is reconciled once; one key is never on two workers at once while
// different keys run side by side; keys this replica does not own are never
// reconciled.
func TestKeysAreMergedSerializedAndFiltered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		var topic changes.Topic[string]
		sub := topic.Subscribe()
		stop := run(t, controller.Options{Name: "test", Workers: 3,
			Owns: func(key string) bool { return key != "theirs" },
			List: func(context.Context) ([]string, error) { return []string{"a", "b", "theirs"}, nil },
			Reconcile: func(_ context.Context, key string) (time.Duration, error) {
				c.enter(key)
				defer c.leave(key)
				time.Sleep(time.Second)
				return 0, nil
			}}, func(ctl *controller.Controller) {
			controller.Watch(ctl, sub, func(v string) []string { return []string{v} })
			ctl.Add("c") // before Run: kept until it starts
		})
		defer stop()
		synctest.Wait()
		for range 5 {
			topic.Publish("a") // while a runs: once more after it
			topic.Publish("theirs")
		}
		advance(10 * time.Second)
		if got := len(c.of("a")); got != 2 {
			t.Errorf("a reconciled %d times, want 2 (the listing, then the notices merged)", got)
		}
		if got := len(c.of("b")) + len(c.of("c")); got != 2 {
			t.Errorf("b and c reconciled %d times, want once each", got)
		}
		if len(c.of("theirs")) != 0 {
			t.Error("a key this replica does not own was reconciled")
		}
		if c.overlap {
			t.Error("one key was reconciled on two workers at once")
		}
		if c.most < 2 {
			t.Errorf("at most %d reconciles at once with 3 workers and 3 keys", c.most)
		}
	})
}

// A reconcile that asks for another look gets it then; one that fails is
// retried with the limiter's backoff, no sooner than a RetryAfter asks, and
// rests once it succeeds.
func TestRequeuesAndRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		var mu sync.Mutex
		failures := map[string]int{"flaky": 2, "throttled": 2}
		stop := run(t, controller.Options{Name: "test",
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, time.Minute),
			List:        func(context.Context) ([]string, error) { return []string{"periodic", "flaky", "throttled"}, nil },
			Reconcile: func(_ context.Context, key string) (time.Duration, error) {
				c.enter(key)
				defer c.leave(key)
				if key == "periodic" {
					return 10 * time.Second, nil
				}
				mu.Lock()
				defer mu.Unlock()
				if failures[key] == 0 {
					return 0, nil
				}
				failures[key]--
				if key == "throttled" {
					return 0, &controller.RetryAfter{After: 5 * time.Second, Err: errors.New("busy")}
				}
				return 0, errors.New("not yet")
			}}, nil)
		advance(35 * time.Second)
		stop()
		if got := c.of("periodic"); !slices.Equal(got, []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second}) {
			t.Errorf("periodic reconciled at %v, want every 10s", got)
		}
		// Retried after 1 s, then 2 s; then it rests.
		if got := c.of("flaky"); !slices.Equal(got, []time.Duration{0, time.Second, 3 * time.Second}) {
			t.Errorf("flaky reconciled at %v, want 0s, 1s, 3s", got)
		}
		// Retried after 5 s twice, though its backoff says 1 s, then 2 s.
		if got := c.of("throttled"); !slices.Equal(got, []time.Duration{0, 5 * time.Second, 10 * time.Second}) {
			t.Errorf("throttled reconciled at %v, want 0s, 5s, 10s", got)
		}
	})
}

// Run returns once the reconciles in flight have seen ctx end, and nothing
// runs after.
func TestRunWaitsForReconcilesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started, finished := make(chan struct{}), make(chan struct{})
		stop := run(t, controller.Options{Name: "test",
			List: func(context.Context) ([]string, error) { return []string{"slow"}, nil },
			Reconcile: func(ctx context.Context, _ string) (time.Duration, error) {
				close(started)
				<-ctx.Done()
				time.Sleep(time.Second) // winding down
				close(finished)
				return time.Second, nil
			}}, nil)
		<-started
		stop()
		select {
		case <-finished:
		default:
			t.Fatal("Run returned while a reconcile was still running")
		}
	})
}

// A key added to come later, before or after Run starts, is reconciled
// once its time has come, not before.
func TestAddAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		var ctl *controller.Controller
		stop := run(t, controller.Options{Name: "test",
			Reconcile: func(_ context.Context, key string) (time.Duration, error) {
				c.enter(key)
				defer c.leave(key)
				return 0, nil
			}}, func(x *controller.Controller) {
			ctl = x
			ctl.AddAfter("early", 5*time.Second) // before Run
		})
		synctest.Wait()
		ctl.AddAfter("late", 3*time.Second)
		advance(10 * time.Second)
		stop()
		if got := c.of("early"); !slices.Equal(got, []time.Duration{5 * time.Second}) {
			t.Errorf("early reconciled at %v, want 5s", got)
		}
		if got := c.of("late"); !slices.Equal(got, []time.Duration{3 * time.Second}) {
			t.Errorf("late reconciled at %v, want 3s", got)
		}
	})
}

// Started is false until Run has listed the keys to start with and its
// workers run, also when the listing failed (the sources still bring keys).
func TestStartedOnceListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var ctl *controller.Controller
		stop := run(t, controller.Options{Name: "test",
			List: func(context.Context) ([]string, error) {
				<-release
				return nil, errors.New("not migrated yet")
			},
			Reconcile: func(context.Context, string) (time.Duration, error) { return 0, nil },
		}, func(c *controller.Controller) { ctl = c })
		defer stop()
		synctest.Wait()
		if ctl.Started() {
			t.Fatal("started before its listing returned")
		}
		close(release)
		synctest.Wait()
		if !ctl.Started() {
			t.Fatal("not started once its listing returned")
		}
	})
}

// A sweep lists at once and then every interval; the keys of a listing
// that failed still count.
func TestSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		var listings atomic.Int32
		stop := run(t, controller.Options{Name: "test",
			Reconcile: func(_ context.Context, key string) (time.Duration, error) {
				c.enter(key)
				defer c.leave(key)
				return 0, nil
			}}, func(ctl *controller.Controller) {
			ctl.Sweep(10*time.Second, func(context.Context) ([]string, error) {
				if listings.Add(1) == 2 {
					return []string{"a"}, errors.New("one listing failed")
				}
				return []string{"a"}, nil
			})
		})
		synctest.Wait()
		advance(25 * time.Second)
		stop()
		if got, want := c.of("a"), []time.Duration{0, 10 * time.Second, 20 * time.Second}; !slices.Equal(got, want) {
			t.Errorf("a reconciled at %v, want %v", got, want)
		}
	})
}
