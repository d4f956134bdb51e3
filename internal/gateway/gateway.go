package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/controller"
	"github.com/dcm-project/storage-gateway/internal/dcm"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/internal/forwarding"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/secrets"
	"github.com/dcm-project/storage-gateway/internal/snapshots"
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

// Options are what differs between `serve` and the in-process tests; the
// configuration says everything else.
type Options struct {
	// Logger receives every part's logs (default slog.Default()).
	Logger *slog.Logger
	// Listener, when set, is served instead of listening on SG_LISTEN_ADDR
	// (a test knows its URL before the gateway starts).
	Listener net.Listener
	// Reload delivers reload requests (SIGHUP in serve): the key ring and
	// the static token file are read again.
	Reload <-chan os.Signal
	// WrapHandler, when set, wraps the API handler (tests check every
	// answer against the contract).
	WrapHandler func(http.Handler) http.Handler
	// Intervals default to production's; tests shorten them.
	Intervals Intervals
}

// Intervals of the background work; zero values take the defaults.
type Intervals struct {
	// Health is how often a cluster whose last check failed is checked
	// again (10s; a healthy one every 5 × Health) and HealthTimeout bounds
	// one check (5s).
	Health, HealthTimeout time.Duration
	// Follow is how often the status follower re-evaluates every cached
	// claim, for provisioning timeouts and new warnings (2s).
	Follow time.Duration
	// Reconcile is how often interrupted volume flows are repaired (30s).
	Reconcile time.Duration
	// Watch is how often the registry is read for changes made on other
	// replicas (2s).
	Watch time.Duration
	// DCMCheck is how often each registered provider is read back from DCM
	// (30s; see dcm.Options.CheckInterval).
	DCMCheck time.Duration
}

func (i Intervals) withDefaults() Intervals {
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	set(&i.Follow, 2*time.Second)
	set(&i.Watch, 2*time.Second)
	set(&i.Reconcile, 30*time.Second)
	set(&i.DCMCheck, 30*time.Second)
	return i // Health and HealthTimeout: the pool's defaults
}

// Gateway is the assembled runtime. New builds it; Run runs it once and
// releases everything it holds.
type Gateway struct {
	cfg       config.Config
	opts      Options
	log       *slog.Logger
	startTime time.Time

	db *pgxpool.Pool
	// writes commits the hot paths' writes together (a create's intent
	// and claim, the audit rows): one group for the process, so they
	// share commits with each other.
	writes     *postgres.Group
	migrator   *postgres.Migrator
	auth       *auth.Authenticator
	reloadAuth func(context.Context) error
	audit      *auth.AuditLog
	clusters   *clusters.Pool
	registry   *environments.Service
	connector  *environments.Connector
	probes     *controller.Controller
	registrar  *dcm.Registrar // nil when DCM registration is off
	agents     *dcm.Agents    // nil when DCM's agent dispatch is off
	member     string         // this replica's member id
	membership *membership.Membership
	// registrations has the membership rebalance at once when an
	// environment is registered here.
	registrations *changes.Subscription[environments.Change]
	index         *fleet.Index
	feed          *fleet.Feed
	nats          *outbox.NATS
	relay         *outbox.Relay
	recorder      status.Recorder
	// background are the workers Run starts (see workers).
	background []*worker
	tracker    *status.Tracker
	follower   *status.Follower
	volumes    *volumes.Service
	reconciler *controller.Controller
	snapshots  *snapshots.Service
	// snapshotReconciler keeps the snapshots' records current.
	snapshotReconciler *controller.Controller
	listener           net.Listener
	server             *http.Server
}

// New builds every part: it connects to Postgres (migrating it when
// SG_MIGRATE_ON_START is set), NATS (or starts the embedded server) and
// opens the listener, but starts no background work; Run does. If New
// fails, everything it opened is closed again.
func New(ctx context.Context, cfg config.Config, opts Options) (_ *Gateway, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	g := &Gateway{cfg: cfg, opts: opts, log: opts.Logger, startTime: time.Now()}
	g.opts.Intervals = opts.Intervals.withDefaults()
	g.log.Info("starting", "version", version.Get().Version)
	defer func() {
		if err != nil {
			g.release()
		}
	}()
	keys, err := LoadKeyRing(cfg)
	if err != nil {
		return nil, err
	}
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := g.openDatabase(startCtx); err != nil {
		return nil, err
	}
	if g.auth, g.reloadAuth, err = newAuthenticator(startCtx, cfg, g.log); err != nil {
		return nil, err
	}
	g.audit = auth.NewAuditLog(auth.AuditOptions{DB: g.db, Group: g.writes, Logger: g.log, Retention: cfg.AuditRetention})
	// One rate limiter per environment, shared by its pool connection and
	// every probe of it.
	limiters := clusters.NewLimiters(cfg.ClusterQPS, cfg.ClusterBurst)
	g.clusters = clusters.NewPool(clusters.PoolOptions{
		Client:         clusters.ClientOptions{Egress: cfg.EgressPolicy()},
		Limiters:       limiters,
		SyncTimeout:    cfg.ClusterSyncTimeout,
		HealthInterval: g.opts.Intervals.Health,
		HealthTimeout:  g.opts.Intervals.HealthTimeout,
		Logger:         g.log,
	})
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := errors.Join(limiters.Register(metrics), g.clusters.Register(metrics)); err != nil {
		return nil, err
	}
	if g.member, err = cfg.Member(); err != nil {
		return nil, err
	}
	if err := g.connectNATS(); err != nil {
		return nil, err
	}
	g.membership = membership.New(membership.Options{DB: g.db, ID: g.member, AdvertiseURL: cfg.AdvertiseURL,
		Lease: cfg.MemberLease, Departures: g.nats.Conn, Logger: g.log})
	if err := g.membership.Register(metrics); err != nil {
		return nil, err
	}
	g.registry = environments.New(cfg, g.db, keys, limiters, g.log)
	if err := g.registry.CheckKeys(startCtx); err != nil {
		return nil, err
	}
	if err := g.registry.UpgradeSeals(startCtx); err != nil {
		g.log.Warn("credentials sealed in the legacy format were not all re-sealed; retried at the next start", "error", err)
	}
	// A new environment is claimed at once, not at the next heartbeat.
	g.registrations = g.registry.Subscribe()
	g.connector = environments.NewConnector(environments.ConnectorOptions{Registry: g.registry, Pool: g.clusters, Owned: g.membership})
	g.probes = g.registry.Probes(environments.ProbeOptions{Owned: g.membership, Interval: cfg.ProbeInterval,
		ReadyInterval: cfg.ProbeReadyInterval, Workers: cfg.ProbeConcurrency})
	g.index = fleet.NewIndex()
	g.feed = fleet.NewFeed(fleet.FeedOptions{Index: g.index, Clusters: g.clusters, Registry: g.registry,
		Store: fleet.Store{DB: g.db}, Owned: g.membership, Logger: g.log})
	if err := g.feed.Load(startCtx); err != nil {
		// Not migrated yet (SG_MIGRATE_ON_START off): /readyz says so, and
		// the feed retries until it loads.
		g.log.Warn("fleet index not loaded yet; retrying in the background", "error", err)
	}
	if err := g.newStatusReporting(metrics); err != nil {
		return nil, err
	}
	g.volumes = volumes.NewService(volumes.Options{DB: g.db, Group: g.writes, Snapshots: snapshots.Sources{DB: g.db}, Environments: g.registry, Clusters: g.clusters, Logger: g.log, Recorder: g.recorder, Tracker: g.tracker, Leases: g.membership,
		WriteTimeout: cfg.ClusterWriteTimeout})
	g.reconciler = g.volumes.NewReconciler(g.opts.Intervals.Reconcile)
	g.snapshots = snapshots.NewService(snapshots.Options{DB: g.db, Group: g.writes, Outbox: g.recorder.Outbox, Volumes: g.volumes, Environments: g.registry,
		Clusters: g.clusters, Logger: g.log, WriteTimeout: cfg.ClusterWriteTimeout})
	g.snapshotReconciler = g.snapshots.NewReconciler(g.opts.Intervals.Reconcile)
	if err := g.newRegistrar(); err != nil {
		return nil, err
	}
	if err := g.newAgents(); err != nil {
		return nil, err
	}
	g.background = g.workers()
	if err := g.newServer(ctx, metrics); err != nil {
		return nil, err
	}
	return g, nil
}

// LoadKeyRing reads SG_KEY_RING_FILE; the gateway never runs without one,
// since it could neither seal new credentials nor open stored ones.
func LoadKeyRing(cfg config.Config) (*secrets.KeyRing, error) {
	if cfg.KeyRingFile == "" {
		return nil, errors.New("SG_KEY_RING_FILE: must name the key ring file that seals cluster credentials " +
			"(create one with `storage-gateway keys init --file PATH`)")
	}
	ring, err := secrets.LoadKeyRing(cfg.KeyRingFile)
	if err != nil {
		return nil, fmt.Errorf("SG_KEY_RING_FILE: %w", err)
	}
	return ring, nil
}

func (g *Gateway) openDatabase(ctx context.Context) error {
	db, err := postgres.Open(ctx, g.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	g.db, g.writes = db, postgres.NewGroup(db)
	if g.migrator, err = postgres.NewMigrator(db, g.log); err != nil {
		return err
	}
	if g.cfg.MigrateOnStart {
		applied, err := g.migrator.Up(ctx)
		if err != nil {
			return err
		}
		g.log.Info("schema migrated", "applied", applied)
	}
	return nil
}

func (g *Gateway) newRegistrar() error {
	cfg := g.cfg
	if cfg.DCMRegistrationURL == "" {
		g.log.Info("DCM registration off (SG_DCM_REGISTRATION_URL is unset)")
		return nil
	}
	var err error
	g.registrar, err = dcm.New(dcm.Options{URL: cfg.DCMRegistrationURL, PublicURL: cfg.PublicURL,
		Environments: g.registry, Interval: cfg.DCMRegistrationInterval, Logger: g.log, Clusters: g.clusters, Owned: g.membership,
		Credentials: dcm.Credentials{TokenFile: cfg.DCMTokenFile, ClientID: cfg.DCMClientID,
			ClientSecretFile: cfg.DCMClientSecretFile, TokenURL: cfg.DCMTokenURL},
		Served: g.volumes.Served, Repeat: g.volumes.RepeatStatus, CheckInterval: g.opts.Intervals.DCMCheck, Audit: g.audit})
	return err
}

// newAgents builds DCM's agent dispatch when SG_DCM_AGENT_API_URL is set:
// each environment is DCM's storage agent, its requests coming over the
// gateway's NATS (DCM's).
func (g *Gateway) newAgents() error {
	cfg := g.cfg
	if cfg.DCMAgentAPIURL == "" {
		g.log.Info("DCM agent dispatch off (SG_DCM_AGENT_API_URL is unset)")
		return nil
	}
	js, err := jetstream.New(g.nats.Conn)
	if err != nil {
		return err
	}
	checkSpec, err := api.StorageSpecRules()
	if err != nil {
		return err
	}
	g.agents, err = dcm.NewAgents(dcm.AgentOptions{URL: cfg.DCMAgentAPIURL, Environments: g.registry, Owned: g.membership,
		Owners: g.membership, Volumes: g.volumes, CheckSpec: checkSpec, Clusters: g.clusters, JetStream: js, Heartbeat: cfg.DCMAgentHeartbeat, AckWait: cfg.DCMAgentAckWait, Cost: cfg.DCMAgentCost, Audit: g.audit, Logger: g.log,
		Credentials: dcm.Credentials{TokenFile: cfg.DCMTokenFile, ClientID: cfg.DCMClientID,
			ClientSecretFile: cfg.DCMClientSecretFile, TokenURL: cfg.DCMTokenURL}})
	return err
}

// connectNATS connects to NATS (or starts the embedded server): status
// events and the replicas' departure notices travel on it.
func (g *Gateway) connectNATS() error {
	cfg := g.cfg
	natsOpts := outbox.NATSOptions{URL: cfg.NATSURL, EmbeddedStoreDir: cfg.EmbeddedNATSDir()}
	if cfg.EmbeddedNATSListen != config.EmbeddedNATSListenOff {
		natsOpts.EmbeddedListen = cfg.EmbeddedNATSListen
	}
	var err error
	g.nats, err = outbox.ConnectNATS(natsOpts, g.log)
	return err
}

// newStatusReporting builds the status flow: cluster -> follower -> tracker
// (flap budget) -> outbox (with the volume record, one transaction) -> relay
// -> NATS.
func (g *Gateway) newStatusReporting(metrics prometheus.Registerer) error {
	cfg := g.cfg
	var err error
	if g.relay, err = outbox.NewRelay(outbox.RelayOptions{DB: g.db, Conn: g.nats.Conn, Metrics: metrics, Logger: g.log,
		Retention: cfg.OutboxRetention}); err != nil {
		return err
	}
	// The one writer of volume status: the tracker records what the
	// cluster shows, the volume service what its requests do.
	g.recorder = status.Recorder{Outbox: outbox.NewWriter(outbox.WriterOptions{DB: g.db, Group: g.writes, Wake: g.relay.Notify}), Leases: g.membership}
	g.tracker = status.NewTracker(status.TrackerOptions{Record: g.recorder.RecordObserved, Window: cfg.StatusDebounce, Logger: g.log})
	g.follower = status.NewFollower(status.FollowerOptions{Tracker: g.tracker, Pool: g.clusters, ProvisioningTimeout: cfg.ProvisioningTimeout, Logger: g.log})
	return nil
}

// dcmProviders is the registrar as the API asks it, nil (not a nil
// registrar in an interface) when registration is off.
func (g *Gateway) dcmProviders() api.DCMProviders {
	if g.registrar == nil {
		return nil
	}
	return g.registrar
}

func (g *Gateway) newServer(ctx context.Context, metrics *prometheus.Registry) error {
	cfg := g.cfg
	var handler http.Handler = api.New(api.Options{
		Auth:                g.auth,
		Audit:               g.audit,
		AdminWriteRate:      cfg.AdminWriteRate,
		AdminWriteBurst:     cfg.AdminWriteBurst,
		AllowedHosts:        allowedHosts(cfg),
		MetricsRequireAuth:  cfg.MetricsRequireAuth,
		Logger:              g.log,
		Metrics:             metrics,
		FleetMetrics:        []prometheus.Gatherer{g.registry.Metrics(), g.index.Metrics(), g.volumes.Metrics()},
		Environments:        g.registry,
		Volumes:             g.volumes,
		Snapshots:           g.snapshots,
		Fleet:               g.index,
		StartTime:           g.startTime,
		HealthUnhealthyCode: cfg.HealthUnhealthyCode,
		DCM:                 g.dcmProviders(),
		Readiness: []api.Check{
			{Name: "postgres", Check: g.db.Ping},
			{Name: "migrations", Check: g.migrator.CheckCurrent},
			{Name: "nats", Check: g.nats.Check},
			{Name: "membership", Check: g.membership.Joined},
			{Name: "background work", Check: g.backgroundStarted},
		},
		Forwarding: forwarding.New(forwarding.Options{Owners: g.membership, Keys: g.registry.KeyRing, Member: g.member, Incarnation: g.membership.Incarnation(), Logger: g.log}),
		Owned:      g.membership,
	})
	if g.opts.WrapHandler != nil {
		handler = g.opts.WrapHandler(handler)
	}
	g.listener = g.opts.Listener
	if g.listener == nil {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.ListenAddr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.ListenAddr, err)
		}
		g.listener = ln
	}
	g.server = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	return nil
}

// Addr is the address the API listens on.
func (g *Gateway) Addr() net.Addr { return g.listener.Addr() }

// Clusters is the cluster pool (tests inspect connections through it).
func (g *Gateway) Clusters() *clusters.Pool { return g.clusters }

// Volumes is the volume service (tests run reconciliation passes on it).
func (g *Gateway) Volumes() *volumes.Service { return g.volumes }

func (g *Gateway) natsDescription() string {
	if g.cfg.NATSURL != "" {
		return g.nats.Conn.ConnectedUrlRedacted()
	}
	if addr := g.nats.EmbeddedAddr(); addr != "" {
		return "embedded, nats://" + addr
	}
	return "embedded, in-process only"
}
