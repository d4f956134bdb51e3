package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dcm-project/storage-gateway/internal/environments"
)

// worker is one background part under the gateway's ownership: Start runs
// it on its own goroutine, Stop ends it and waits for it until the deadline
// it is given; one that misses the deadline is left to the exiting process
// (and logged by the shutdown).
type worker struct {
	name string
	run  func(context.Context)
	// started, if set, reports whether the worker is under way:
	// readiness waits for it (see backgroundStarted).
	started func() bool
	// first: the workers after it start once it started, or after
	// firstStartWait (see Run).
	first  bool
	cancel context.CancelFunc
	done   chan struct{}
}

// firstStartWait bounds how long Run waits for a first worker to start
// (a database not migrated yet never lets it): the rest start anyway.
const firstStartWait = 2 * time.Second

// awaitStart waits until w started, firstStartWait has passed or ctx ended.
func (w *worker) awaitStart(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, firstStartWait)
	defer cancel()
	_ = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) { return w.started(), nil })
}

func (w *worker) Start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		w.run(ctx)
	}()
}

func (w *worker) Stop(ctx context.Context) error {
	w.cancel()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", w.name, ctx.Err())
	}
}

// backgroundStarted fails readiness while a background worker that reports
// its start has not started: a replica whose registry watch has not read
// the registry, whose fleet index is not loaded or whose reconcilers have
// not listed what they follow answers requests with less than it knows.
func (g *Gateway) backgroundStarted(context.Context) error {
	var pending []string
	for _, w := range g.background {
		if w.started != nil && !w.started() {
			pending = append(pending, w.name)
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("not started yet: %s", strings.Join(pending, ", "))
	}
	return nil
}

// workers are the background parts but the membership heartbeat, in start
// order. The heartbeat starts before them and stops after them (see
// shutdown), so this replica's leases hold while they finish.
func (g *Gateway) workers() []*worker {
	ws := []*worker{
		// First: it learns the registry's revisions before the reconcilers
		// list what they follow, so a change another replica makes in
		// between is one it publishes, not one both miss.
		{name: "registry watch", run: func(ctx context.Context) { g.registry.Watch(ctx, g.opts.Intervals.Watch) },
			started: g.registry.Watching, first: true},
		// Only a registration moves ownership at once: a deletion drops its
		// owner row with it, and an update (a pin) is followed within a
		// lease. Waking for those too spent the paced wake-ups a
		// registration right after them needed (a new environment then
		// answered 503 for up to 250 ms).
		{name: "claim on registration", run: func(ctx context.Context) {
			g.registrations.Run(ctx, func(_ context.Context, c environments.Change) {
				if c.Registered {
					g.membership.Rebalance()
				}
			})
		}},
		// Before the connector, so it mostly follows a connection from its
		// first event; one it joins late hands it its cached claims.
		{name: "status follower", run: func(ctx context.Context) { g.follower.Run(ctx, g.opts.Intervals.Follow) }},
		{name: "connector", run: g.connector.Run, started: g.connector.Started}, // the pool follows the registry
		{name: "probes", run: g.probes.Run, started: g.probes.Started},
		{name: "outbox relay", run: g.relay.Run},
		{name: "volume reconciler", run: g.reconciler.Run, started: g.reconciler.Started},
		{name: "snapshot reconciler", run: g.snapshotReconciler.Run, started: g.snapshotReconciler.Started},
		{name: "fleet feed", run: g.feed.Run, started: g.feed.Started},
		{name: "reloader", run: g.reloadOnRequest},
		{name: "audit retention", run: g.audit.Run},
	}
	if g.registrar != nil {
		ws = append(ws, &worker{name: "DCM registrar", run: g.registrar.Run, started: g.registrar.Started})
	}
	if g.agents != nil {
		ws = append(ws, &worker{name: "DCM agents", run: g.agents.Run, started: g.agents.Started})
	}
	return ws
}

// Run starts the background work and serves the API until ctx ends or the
// server fails, then shuts down (see the package doc) and returns. Run may
// be called once; it releases everything New opened.
func (g *Gateway) Run(ctx context.Context) error {
	// Workers stop in the shutdown sequence, not when ctx ends.
	background := context.WithoutCancel(ctx)
	heartbeat := &worker{name: "membership heartbeat", run: g.membership.Run}
	heartbeat.Start(background)
	// The status writer stops in the shutdown sequence too, flushed by
	// tracker.Close while the heartbeat still renews the leases.
	go g.tracker.Run()
	workers := g.background
	for _, w := range workers {
		w.Start(background)
		if w.first {
			w.awaitStart(ctx)
		}
	}
	served := make(chan error, 1)
	go func() { served <- g.server.Serve(g.listener) }()
	g.log.Info("listening", "addr", g.listener.Addr().String(), "nats", g.natsDescription(), "auth", g.auth.Describe())

	var runErr error
	select {
	case err := <-served:
		runErr = fmt.Errorf("http server: %w", err)
		served = nil // Serve has returned
	case <-g.membership.Displaced():
		runErr = fmt.Errorf("SG_MEMBER_ID %q is used by another live replica, which took it over; give each replica its own", g.member)
	case <-ctx.Done():
	}
	g.log.Info("shutting down", "timeout", g.cfg.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(background, g.cfg.ShutdownTimeout)
	defer cancel()
	g.shutdown(shutdownCtx, heartbeat, workers, served)
	return runErr
}

// step is one step of the shutdown.
type step struct {
	name string
	run  func(context.Context) error
}

// shutdown stops everything in dependency order, every step under the one
// deadline of ctx; a step that misses it is logged and the next still runs
// (later steps then only release what they hold). The workers are told to
// stop together, last started first, and waited for; the membership
// heartbeat goes on until the status flush is done, so the flush writes
// under claims that hold however long the workers took. served is Serve's
// result, nil if it has returned already.
func (g *Gateway) shutdown(ctx context.Context, heartbeat *worker, workers []*worker, served <-chan error) {
	g.runSteps(ctx, append([]step{
		{"stop accepting HTTP", func(ctx context.Context) error {
			err := g.server.Shutdown(ctx)
			if served != nil {
				// Serve returns ErrServerClosed as soon as Shutdown closed
				// the listener.
				if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
					err = errors.Join(err, serveErr)
				}
			}
			return err
		}},
		{"stop background workers and informers", func(ctx context.Context) error {
			for _, w := range slices.Backward(workers) {
				w.cancel()
			}
			var errs []error
			for _, w := range slices.Backward(workers) {
				errs = append(errs, w.Stop(ctx))
			}
			errs = append(errs, within(ctx, g.clusters.StopWatching))
			return errors.Join(errs...)
		}},
		// Recorded while this replica still owns the environments: the
		// fence refuses them after it left.
		{"flush status transitions", func(ctx context.Context) error {
			g.tracker.Close(ctx)
			return ctx.Err()
		}},
		{"stop the membership heartbeat", heartbeat.Stop},
		{"leave the membership", g.membership.Leave}, // the others take over at once
		{"drain the outbox", func(ctx context.Context) error {
			if err := g.relay.Drain(ctx); err != nil {
				return fmt.Errorf("status events left in the outbox for the next start: %w", err)
			}
			return nil
		}},
	}, g.closeSteps()...))
	g.log.Info("stopped")
}

func (g *Gateway) runSteps(ctx context.Context, steps []step) {
	for _, s := range steps {
		start := time.Now()
		if err := s.run(ctx); err != nil {
			g.log.Warn("shutdown step incomplete", "step", s.name, "error", err)
			continue
		}
		g.log.Debug("shutdown step done", "step", s.name, "took", time.Since(start).String())
	}
}

// closeSteps close what New opened, last first: the status writer (closed
// already by the flush on the way out of Run), NATS, cluster connections,
// the database. They skip what a partly built gateway does not have.
func (g *Gateway) closeSteps() []step {
	var steps []step
	if g.tracker != nil {
		steps = append(steps, step{"stop the status writer", func(ctx context.Context) error {
			g.tracker.Close(ctx)
			return nil
		}})
	}
	if g.nats != nil {
		steps = append(steps, step{"close NATS", func(ctx context.Context) error {
			g.nats.Close(ctx) // drains within ctx, then closes
			return nil
		}})
	}
	if g.clusters != nil {
		steps = append(steps, step{"close cluster connections", func(ctx context.Context) error {
			return within(ctx, g.clusters.Close)
		}})
	}
	if g.db != nil {
		steps = append(steps, step{"close the database", func(ctx context.Context) error {
			if g.migrator != nil {
				_ = g.migrator.Close()
			}
			// Waits for connections still in use (a request or worker that
			// missed the deadline).
			return within(ctx, g.db.Close)
		}})
	}
	return steps
}

// release closes what a New that failed had opened, within the shutdown
// timeout.
func (g *Gateway) release() {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	defer cancel()
	g.runSteps(ctx, g.closeSteps())
}

// within runs fn and waits for it until ctx ends; fn keeps running after
// that, left to the process that is about to exit (the shutdown logs it).
func within(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reload reads the key ring and the static token file (or the OIDC
// issuer's key set) again (SIGHUP in serve), so key rotation, token changes
// and a key the identity provider withdrew need no restart: `keys
// add`/`keys promote` or `tokens create`/`tokens revoke`, then SIGHUP every
// replica. A ring that cannot be read, or lacks a key stored credentials
// use, is refused and the current one kept; so is a token file or key set
// that cannot be read. Each failure is logged, and the first returned.
func (g *Gateway) Reload(ctx context.Context) error {
	ring, keysErr := LoadKeyRing(g.cfg)
	if keysErr == nil {
		keysErr = g.registry.ReplaceKeys(ctx, ring)
	}
	if ctx.Err() != nil {
		return ctx.Err() // shutting down (a closed terminal sends SIGHUP, then SIGTERM follows): nothing to reload for
	}
	if keysErr != nil {
		g.log.ErrorContext(ctx, "key ring not reloaded; keeping the current one", "error", keysErr)
	}
	if g.reloadAuth == nil {
		return keysErr
	}
	tokensErr := g.reloadAuth(ctx)
	if tokensErr != nil {
		g.log.ErrorContext(ctx, "tokens not reloaded; keeping the current ones", "mode", g.cfg.AuthMode, "error", tokensErr)
	} else {
		g.log.InfoContext(ctx, "tokens reloaded", "mode", g.cfg.AuthMode, "audit", true)
	}
	return errors.Join(keysErr, tokensErr)
}

// reloadOnRequest reloads on every request from Options.Reload.
func (g *Gateway) reloadOnRequest(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.opts.Reload:
			_ = g.Reload(ctx) // logged
		}
	}
}
