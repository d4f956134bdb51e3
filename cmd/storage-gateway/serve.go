package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/dcm"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/events"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/status"
	"github.com/dcm-project/storage-gateway/internal/version"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

// startTimeout bounds connecting to Postgres and migrating at start.
const startTimeout = time.Minute

// readHeaderTimeout and maxHeaderBytes bound a request's headers, before any
// handler sees it.
const (
	readHeaderTimeout = 10 * time.Second
	maxHeaderBytes    = 64 << 10
)

// reconcileInterval is how often interrupted volume flows are repaired;
// followInterval how often the status follower subscribes to newly
// connected environments and re-evaluates cached claims.
const (
	reconcileInterval = 30 * time.Second
	followInterval    = 2 * time.Second
)

func newServeCommand() *cobra.Command {
	return &cobra.Command{
		Use: "serve",
		Example: "  SG_DATABASE_URL=postgres://postgres@127.0.0.1:5432/storage_gateway SG_KEY_RING_FILE=keys.json \\\n" +
			"    SG_AUTH_TOKEN_FILE=tokens.json storage-gateway serve",
		Short: "Run the gateway's HTTP API until SIGTERM or SIGINT",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, logger, err := loadConfig()
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, logger)
		},
	}
}

// serve runs until ctx ends, then shuts down in dependency order: stop
// accepting HTTP, stop the background workers (flushing status into the
// outbox and draining it), drain NATS, close the cluster pool, close the
// database (all but the first deferred).
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	startTime := time.Now()
	logger.Info("starting", "version", version.Get().Version)
	// Registered first: a SIGHUP sent while the gateway starts (say, to every
	// replica during a key rotation) must not kill it.
	hangups := make(chan os.Signal, 1)
	signal.Notify(hangups, syscall.SIGHUP)
	defer signal.Stop(hangups)

	keys, err := loadKeyRing(cfg)
	if err != nil {
		return err
	}

	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	pool, err := postgres.Open(startCtx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := postgres.NewMigrator(pool, logger)
	if err != nil {
		return err
	}
	defer func() { _ = migrator.Close() }()
	if cfg.MigrateOnStart {
		applied, err := migrator.Up(startCtx)
		if err != nil {
			return err
		}
		logger.Info("schema migrated", "applied", applied)
	}
	authenticator, reloadTokens, err := newAuthenticator(startCtx, cfg, logger)
	if err != nil {
		return err
	}
	// One rate limiter per environment, shared by its pool connection and
	// every probe of it.
	limiters := clusters.NewLimiters(cfg.ClusterQPS, cfg.ClusterBurst)
	// The pool reports reachability changes to the registry and the fleet
	// index, storage changes to the index, and a cluster that (re)synced to
	// the volume reconciler; the registry tells the pool which clusters to
	// connect to, and the index and DCM registration what changed. The hooks
	// are late-bound: each side needs the other.
	var registry *environments.Service
	var registrar *dcm.Registrar
	var feed *fleet.Feed
	resynced := make(chan string, 64)
	clusterPool := clusters.NewPool(clusters.PoolOptions{
		Client:      clusters.ClientOptions{Egress: cfg.EgressPolicy()},
		Limiters:    limiters,
		SyncTimeout: cfg.ClusterSyncTimeout,
		Logger:      logger,
		OnHealth: func(id string, h clusters.Health) {
			registry.RecordHealth(id, h)
			feed.ClusterChanged(id)
			if h.State == clusters.StateReady && h.Synced {
				select {
				case resynced <- id:
				default: // the periodic reconciliation catches up
				}
				if registrar != nil {
					registrar.Changed() // the capacity it publishes is known now
				}
			}
		},
		OnStorage: func(id string) { feed.ClusterChanged(id) },
	})
	defer clusterPool.Close()
	registry = newEnvironmentService(cfg, pool, keys, clusterPool, limiters, logger, func(o *environments.Options) {
		o.Changed = func(string) {
			feed.RegistryChanged()
			if registrar != nil {
				registrar.Changed()
			}
		}
		o.Deleted = func(id string, reg environments.DCMRegistration) {
			feed.RegistryChanged()
			if registrar != nil {
				registrar.Forget(id, reg)
			}
		}
	})
	if err := registry.CheckKeys(startCtx); err != nil {
		return err
	}
	if err := registry.UpgradeSeals(startCtx); err != nil {
		logger.Warn("credentials sealed in the legacy format were not all re-sealed; retried at the next start", "error", err)
	}
	if cfg.DCMRegistrationURL != "" {
		if registrar, err = dcm.New(dcm.Options{URL: cfg.DCMRegistrationURL, PublicURL: cfg.PublicURL,
			Environments: registry, Interval: cfg.DCMRegistrationInterval, Logger: logger,
			TotalStorage: clusterPool.TotalStorage, Credentials: dcm.Credentials{TokenFile: cfg.DCMTokenFile,
				ClientID: cfg.DCMClientID, ClientSecretFile: cfg.DCMClientSecretFile, TokenURL: cfg.DCMTokenURL}}); err != nil {
			return err
		}
	} else {
		logger.Info("DCM registration off (SG_DCM_REGISTRATION_URL is unset)")
	}
	fleetIndex := fleet.NewIndex()
	feed = fleet.NewFeed(fleet.FeedOptions{Index: fleetIndex, Pool: clusterPool, Registry: registry,
		Store: fleet.Store{DB: pool}, Logger: logger})
	if err := feed.Load(startCtx); err != nil {
		// Not migrated yet (SG_MIGRATE_ON_START off): /readyz says so, and
		// the feed retries until it loads.
		logger.Warn("fleet index not loaded yet; retrying in the background", "error", err)
	}

	natsOpts := events.NATSOptions{URL: cfg.NATSURL, EmbeddedStoreDir: cfg.EmbeddedNATSDir()}
	if cfg.EmbeddedNATSListen != config.EmbeddedNATSListenOff {
		natsOpts.EmbeddedListen = cfg.EmbeddedNATSListen
	}
	nc, err := events.ConnectNATS(natsOpts, logger)
	if err != nil {
		return err
	}
	// Every exit path drains NATS within the shutdown bound, before the
	// database pool (deferred earlier) closes.
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		nc.Close(closeCtx)
		logger.Info("stopped")
	}()

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Status flows cluster -> follower -> tracker (debounce) -> outbox
	// (with the volume record, one transaction) -> relay -> NATS.
	relay, err := events.NewRelay(pool, nc.Conn, metrics, logger)
	if err != nil {
		return err
	}
	tracker := status.NewTracker(status.Recorder{DB: pool, Queued: relay.Notify}, cfg.StatusDebounce, logger)
	follower := &status.Follower{Tracker: tracker, Pool: clusterPool, ProvisioningTimeout: cfg.ProvisioningTimeout, Logger: logger}
	volumeService := volumes.NewService(volumes.Options{DB: pool, Environments: registry, Pool: clusterPool, Logger: logger, Queued: relay.Notify})
	audit := auth.NewAuditLog(pool, logger, cfg.AuditRetention)
	handler := api.New(api.Options{
		Auth:                authenticator,
		Audit:               audit,
		AdminWriteRate:      cfg.AdminWriteRate,
		AdminWriteBurst:     cfg.AdminWriteBurst,
		AllowedHosts:        allowedHosts(cfg),
		MetricsRequireAuth:  cfg.MetricsRequireAuth,
		Logger:              logger,
		Metrics:             metrics,
		Environments:        registry,
		Volumes:             volumeService,
		Fleet:               fleetIndex,
		StartTime:           startTime,
		HealthUnhealthyCode: cfg.HealthUnhealthyCode,
		Readiness: []api.Check{
			{Name: "postgres", Check: pool.Ping},
			{Name: "migrations", Check: migrator.CheckCurrent},
			{Name: "nats", Check: nc.Check},
		},
	})

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.ListenAddr, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("listening", "addr", ln.Addr().String(), "nats", natsDescription(cfg, nc), "auth", authenticator.Describe())

	// The background workers (probes and pool sync, volume reconciler, status
	// follower, outbox relay, fleet feed, key reloader) use the database, the cluster
	// pool and NATS, so they stop, and are waited for, before any closes. The
	// first probe round connects every registered environment. On the way
	// out, debounced transitions are flushed into the outbox and the relay
	// drains what it can in the shutdown bound; the rest goes out next start.
	background, stopBackground := context.WithCancel(ctx)
	var workers sync.WaitGroup
	workers.Go(func() { registry.RunProbes(background, cfg.ProbeInterval) })
	workers.Go(func() { volumeService.RunReconciler(background, reconcileInterval, resynced) })
	workers.Go(func() { follower.Run(background, followInterval) })
	workers.Go(func() { relay.Run(background) })
	workers.Go(func() { feed.Run(background) })
	workers.Go(func() { reloadOnHangup(background, hangups, cfg, registry, reloadTokens, logger) })
	workers.Go(func() { audit.Run(background) })
	if registrar != nil {
		workers.Go(func() { registrar.Run(background) })
	}
	defer func() {
		stopBackground()
		workers.Wait()
		tracker.Close()
		drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if err := relay.Drain(drainCtx); err != nil {
			logger.Warn("status events left in the outbox for the next start", "error", err)
		}
	}()

	select {
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}

	logger.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	shutdownCtx, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancelShutdown()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Warn("http shutdown incomplete", "error", err)
	}
	return nil
}

// reloadOnHangup re-reads the key ring and the static token file on every
// SIGHUP, so key rotation and token changes need no restart: `keys
// add`/`keys promote` or `tokens create`/`tokens revoke`, then SIGHUP every
// replica. A ring that cannot be read, or lacks a key stored credentials
// use, is refused and the current one kept; so is a token file that cannot
// be read.
func reloadOnHangup(ctx context.Context, hangups <-chan os.Signal, cfg config.Config, registry *environments.Service,
	reloadTokens func() error, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hangups:
		}
		ring, err := loadKeyRing(cfg)
		if err == nil {
			err = registry.ReplaceKeys(ctx, ring)
		}
		if ctx.Err() != nil {
			return // shutting down (a closed terminal sends SIGHUP, then SIGTERM follows): nothing to reload for
		}
		if err != nil {
			logger.ErrorContext(ctx, "key ring not reloaded; keeping the current one", "error", err)
		}
		if reloadTokens == nil {
			continue
		}
		if err := reloadTokens(); err != nil {
			logger.ErrorContext(ctx, "token file not reloaded; keeping the current tokens", "error", err)
		} else {
			logger.InfoContext(ctx, "token file reloaded", "audit", true)
		}
	}
}

func natsDescription(cfg config.Config, nc *events.NATS) string {
	if cfg.NATSURL != "" {
		return nc.Conn.ConnectedUrlRedacted()
	}
	if addr := nc.EmbeddedAddr(); addr != "" {
		return "embedded, nats://" + addr
	}
	return "embedded, in-process only"
}
