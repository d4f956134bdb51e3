// Package controller runs reconcilers: a keyed, rate-limited work queue
// (client-go's workqueue, the queue of controller-runtime and cluster-api)
// worked by a fixed number of workers. A part of the gateway that reacts to
// "an environment changed" states only which keys to look at (sources and a
// start-up listing), whether this replica is responsible for a key (Owns,
// checked at enqueue) and what to do for one key (Reconcile). The queue
// merges a key enqueued again while it waits, never hands one key to two
// workers at once, retries a key whose reconcile failed with exponential
// backoff, and schedules the next look a reconcile asks for. It must not
// know what a key means.
package controller

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

	"github.com/dcm-project/storage-gateway/internal/changes"
)

// Reconcile does what one key needs now. requeueAfter > 0 asks for another
// look that much later; an error is retried with the queue's backoff (and
// logged), no sooner than a RetryAfter in it asks; otherwise the key rests
// until a source names it again.
type Reconcile func(ctx context.Context, key string) (requeueAfter time.Duration, err error)

// RetryAfter is a failure whose retry must wait at least After (a server's
// Retry-After), however short the backoff would be.
type RetryAfter struct {
	After time.Duration
	Err   error
}

func (e *RetryAfter) Error() string { return e.Err.Error() }
func (e *RetryAfter) Unwrap() error { return e.Err }

// Options configure a Controller.
type Options struct {
	// Name is for the log.
	Name      string
	Reconcile Reconcile
	// Workers reconcile different keys at once (default 1).
	Workers int
	// Owns says whether this replica is responsible for a key; others are
	// never enqueued (nil: every key).
	Owns func(key string) bool
	// List names every key to look at when Run starts.
	List   func(ctx context.Context) ([]string, error)
	Logger *slog.Logger
	// RateLimiter paces retries of failed keys (default: per key, 1 s
	// doubling to 5 min).
	RateLimiter workqueue.TypedRateLimiter[string]
}

// Controller is one reconciler on its queue. New builds it without starting
// anything; Run runs it.
type Controller struct {
	opts    Options
	sources []func(context.Context)

	mu      sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[string] // set by Run
	pending []pendingKey                                 // added before Run

	// started is set once Run has listed the keys to start with and its
	// workers run.
	started atomic.Bool
}

// Started reports whether Run has listed the keys to start with (whether
// the listing succeeded or not: the sources still bring keys) and its
// workers run: readiness waits for it.
func (c *Controller) Started() bool { return c.started.Load() }

// pendingKey is a key added before Run, and when it is due.
type pendingKey struct {
	key string
	at  time.Time
}

// New returns a Controller.
func New(opts Options) *Controller {
	if opts.Workers < 1 {
		opts.Workers = 1
	}
	if opts.RateLimiter == nil {
		opts.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute)
	}
	return &Controller{opts: opts}
}

// Watch makes sub a source of c: each notice names the keys it concerns.
// Call it before Run; Run delivers the notices.
func Watch[T comparable](c *Controller, sub *changes.Subscription[T], keys func(T) []string) {
	c.Source(func(ctx context.Context) {
		sub.Run(ctx, func(_ context.Context, v T) {
			for _, key := range keys(v) {
				c.Add(key)
			}
		})
	})
}

// Source has Run run source on its own goroutine until ctx ends: a source
// adds keys (Add, AddAfter) as what it follows changes. Call it before Run.
func (c *Controller) Source(source func(ctx context.Context)) {
	c.sources = append(c.sources, source)
}

// Sweep has Run call list every interval, the first time at once, and
// reconcile the keys it names: the periodic looks a reconciler needs beside
// its notices, for what changed unseen. A listing that fails is logged and
// its keys, if any, still count. Call it before Run.
func (c *Controller) Sweep(interval time.Duration, list func(ctx context.Context) ([]string, error)) {
	c.Source(func(ctx context.Context) {
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			keys, err := list(ctx)
			if err != nil && ctx.Err() == nil {
				c.opts.Logger.WarnContext(ctx, "list the keys to sweep", "controller", c.opts.Name, "error", err)
			}
			for _, key := range keys {
				c.Add(key)
			}
		}, interval)
	})
}

// Add has key reconciled soon, if this replica is responsible for it.
func (c *Controller) Add(key string) { c.AddAfter(key, 0) }

// AddAfter has key reconciled once d has passed, if this replica is
// responsible for it.
func (c *Controller) AddAfter(key string, d time.Duration) {
	if c.opts.Owns != nil && !c.opts.Owns(key) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queue == nil {
		c.pending = append(c.pending, pendingKey{key: key, at: time.Now().Add(d)})
		return
	}
	c.queue.AddAfter(key, d)
}

// Run lists the keys to start with, runs the sources and the workers until
// ctx ends, then shuts the queue down and returns once every reconcile in
// flight has returned (they see ctx ended). Run may be called once.
func (c *Controller) Run(ctx context.Context) {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(c.opts.RateLimiter,
		workqueue.TypedRateLimitingQueueConfig[string]{Name: c.opts.Name})
	c.mu.Lock()
	c.queue = queue
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, p := range pending {
		queue.AddAfter(p.key, time.Until(p.at))
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer queue.ShutDown()
	for _, source := range c.sources {
		wg.Go(func() { source(ctx) })
	}
	if c.opts.List != nil {
		keys, err := c.opts.List(ctx)
		if err != nil && ctx.Err() == nil {
			// The sources and the requeues still bring keys; a listing
			// that failed at start is not retried.
			c.opts.Logger.ErrorContext(ctx, "list the keys to reconcile", "controller", c.opts.Name, "error", err)
		}
		for _, key := range keys {
			c.Add(key)
		}
	}
	for range c.opts.Workers {
		wg.Go(func() { c.work(ctx, queue) })
	}
	c.started.Store(true)
	<-ctx.Done()
}

// work reconciles keys until the queue shuts down.
func (c *Controller) work(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string]) {
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		after, err := c.opts.Reconcile(ctx, key)
		owned := c.opts.Owns == nil || c.opts.Owns(key)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			c.opts.Logger.WarnContext(ctx, "reconcile failed; retrying", "controller", c.opts.Name, "key", key, "error", err)
			if owned {
				// As queue.AddRateLimited, with the failure's own minimum.
				wait := c.opts.RateLimiter.When(key)
				if ra, ok := errors.AsType[*RetryAfter](err); ok {
					wait = max(wait, ra.After)
				}
				queue.AddAfter(key, wait)
			}
		case after > 0 && owned:
			queue.Forget(key)
			queue.AddAfter(key, after)
		default:
			queue.Forget(key)
		}
		queue.Done(key)
	}
}
