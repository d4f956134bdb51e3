package api

import (
	"bytes"
	"context"
	_ "embed"
	"log/slog"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo-contrib/echoprometheus"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/dcm"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/internal/forwarding"
	"github.com/dcm-project/storage-gateway/internal/metrics"
	"github.com/dcm-project/storage-gateway/internal/snapshots"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

//go:embed openapi.yaml
var openAPIDocument []byte

// Contract is the OpenAPI document as written (the generated GetSpec
// rewrites operation ids to Go names): the guard reads each operation's
// roles from it, and tests walk it.
func Contract() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(openAPIDocument)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
}

// Check is one readiness dependency check. It returns nil when the dependency
// is usable; the error text is shown to operators, so it must hold no secrets.
type Check struct {
	Name  string
	Check func(context.Context) error
}

// DCMProviders is what the API asks of the gateway's DCM registrar.
type DCMProviders interface {
	Refresh(ctx context.Context, env environments.Environment, force bool) error
	InstancesWithoutClaim(ctx context.Context, env environments.Environment) ([]dcm.Instance, error)
	// CheckRecord has DCM's record of a volume DCM just created read back
	// (DCM drops status events that come before it stores the record).
	CheckRecord(environmentID, volumeID string)
}

// Options configures the HTTP server.
type Options struct {
	Logger *slog.Logger
	// Metrics receives the HTTP request metrics and is exposed on /metrics.
	Metrics *prometheus.Registry
	// FleetMetrics are served on /metrics with Metrics' families: the
	// fleet's large families, built outside the registry (package metrics).
	FleetMetrics []prometheus.Gatherer
	// Readiness lists the checks behind /readyz, run concurrently.
	Readiness []Check
	// ReadinessTimeout bounds each readiness check.
	ReadinessTimeout time.Duration
	// Environments serves the environment registry.
	Environments *environments.Service
	// Volumes serves DCM's storage contract for every environment.
	Volumes *volumes.Service
	// Snapshots serve the snapshots of volumes (beside DCM's contract).
	Snapshots *snapshots.Service
	// Fleet answers the fleet views of StorageClasses.
	Fleet *fleet.Index
	// StartTime is when the gateway started (provider health reports uptime).
	StartTime time.Time
	// HealthUnhealthyCode is the HTTP status of an unhealthy provider health
	// answer: 200 (the body says unhealthy) or 503 for pollers that read only
	// the status code.
	HealthUnhealthyCode int
	// DCM registers environments with DCM; nil when this gateway does not,
	// and every environment's registration then reads OFF, saying why. An
	// admin's verify or update registers again at once, and an adoption
	// reports DCM's instances the environment would not serve.
	DCM DCMProviders
	// Auth identifies callers; required (a disabled-mode Authenticator
	// admits everyone, and says so).
	Auth *auth.Authenticator
	// Audit records admin actions and volume mutations.
	Audit *auth.AuditLog
	// AdminWriteRate and AdminWriteBurst limit each principal's admin writes
	// (per second; default 5, burst 20).
	AdminWriteRate  float64
	AdminWriteBurst int
	// AllowedHosts are the Host names served besides IP literals and
	// localhost; empty serves any name unless authentication is disabled.
	AllowedHosts []string
	// MetricsRequireAuth puts /metrics behind the admin or viewer role.
	MetricsRequireAuth bool
	// Forwarding hands a request for an environment another replica owns
	// to that replica, and verifies what other replicas hand to this one.
	Forwarding *forwarding.Forwarder
	// Owned says which environments this replica owns (it alone connects
	// to their clusters and serves their owner-only operations).
	Owned interface{ Owns(env string) bool }
}

// New builds the gateway's HTTP handler: request ids, security headers,
// the Host check, access logs, panic recovery, metrics, the contract guard
// (authentication, roles, scopes, limits, validation, audit), the generated
// routes and problem+json errors.
func New(opts Options) *echo.Echo {
	if opts.Auth == nil || opts.Audit == nil {
		panic("api: Options.Auth and Options.Audit are required")
	}
	if opts.ReadinessTimeout <= 0 {
		opts.ReadinessTimeout = 2 * time.Second
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = problemHandler(opts.Logger)

	// A panic becomes an opaque INTERNAL problem, logged by the error
	// handler, with its stack in the gateway's JSON log. It is recovered
	// inside the guard too, so a request that panicked is still audited.
	recoverPanics := middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			opts.Logger.ErrorContext(c.Request().Context(), "panic while serving a request", "stack", string(stack))
			return err
		},
	})
	g := newGuard(opts)
	e.Use(requestID, securityHeaders, hostCheck(opts.AllowedHosts, opts.Auth.Mode() == auth.ModeDisabled))
	e.Use(accessLog(opts.Logger))
	e.Use(recoverPanics)
	// Label values must stay bounded whatever clients send: the route
	// template, never the raw path of an unmatched request or the Host header.
	e.Use(echoprometheus.NewMiddlewareWithConfig(echoprometheus.MiddlewareConfig{
		Namespace:                 "storage_gateway",
		Subsystem:                 "http",
		Registerer:                opts.Metrics,
		Skipper:                   func(c echo.Context) bool { return c.Path() == "/metrics" },
		DoNotUseRequestPathFor404: true,
		LabelFuncs: map[string]echoprometheus.LabelValueFunc{
			"host": func(echo.Context, error) string { return "" },
		},
	}))
	// One source failing (a fleet query timing out) costs its own series,
	// logged and counted in promhttp_metric_handler_errors_total, not the
	// whole answer. Uncompressed, as echoprometheus served it: gzip would
	// double the CPU of a large fleet's scrape.
	opts.Metrics.MustRegister(readyGauge(opts))
	gatherer := append(metrics.Gatherers{opts.Metrics}, opts.FleetMetrics...)
	e.GET("/metrics", g.metrics(echo.WrapHandler(promhttp.InstrumentMetricHandler(opts.Metrics, promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		Registry: opts.Metrics, DisableCompression: true,
	}))), opts.MetricsRequireAuth))

	e.Use(g.middleware, recoverPanics)
	RegisterHandlersWithOptions(newCustomMethodRouter(e), NewStrictHandler(&handlers{opts: opts}, nil), RegisterHandlersOptions{
		OperationMiddlewares: map[string][]echo.MiddlewareFunc{
			"updateEnvironment": {mergePatchAsJSON},
			"updateVolume":      {mergePatchAsJSON},
		},
	})
	return e
}

// probePaths are polled constantly; their access logs go to debug level.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

func accessLog(logger *slog.Logger) echo.MiddlewareFunc {
	return middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogMethod:   true,
		LogURIPath:  true,
		LogStatus:   true,
		LogLatency:  true,
		LogError:    true,
		HandleError: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			level := slog.LevelInfo
			if probePaths[v.URIPath] {
				level = slog.LevelDebug
			}
			subject, _ := c.Get(subjectKey).(string)
			logger.LogAttrs(c.Request().Context(), level, "request",
				slog.String("method", v.Method),
				slog.String("path", v.URIPath),
				slog.Int("status", v.Status),
				slog.Duration("latency", v.Latency),
				slog.String("subject", subject),
			)
			return nil
		},
	})
}

// handlers implements the generated StrictServerInterface.
type handlers struct{ opts Options }

func (h *handlers) GetHealthz(context.Context, GetHealthzRequestObject) (GetHealthzResponseObject, error) {
	return GetHealthz200JSONResponse{Status: Ok}, nil
}

// GetReadyz runs every check. Why a check failed (it can name the database
// host and user) is shown only to a caller who presented a valid token.
func (h *handlers) GetReadyz(ctx context.Context, _ GetReadyzRequestObject) (GetReadyzResponseObject, error) {
	p, ok := auth.FromContext(ctx)
	authenticated := ok && (p.Method == auth.MethodOIDC || p.Method == auth.MethodStatic)
	errs := runChecks(ctx, h.opts.Readiness, h.opts.ReadinessTimeout)
	results := make([]ReadinessCheck, len(errs))
	ready := true
	for i, err := range errs {
		results[i] = ReadinessCheck{Name: h.opts.Readiness[i].Name, Ok: err == nil}
		if err != nil {
			ready = false
			if authenticated {
				msg := err.Error()
				results[i].Message = &msg
			}
		}
	}
	mode := ReadinessAuthMode(h.opts.Auth.Mode())
	if !ready {
		return GetReadyz503JSONResponse{Status: NotReady, Checks: results, AuthMode: mode}, nil
	}
	return GetReadyz200JSONResponse{Status: Ready, Checks: results, AuthMode: mode}, nil
}

// runChecks runs checks concurrently, each under timeout, and returns their
// errors in order.
func runChecks(ctx context.Context, checks []Check, timeout time.Duration) []error {
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			errs[i] = c.Check(cctx)
		})
	}
	wg.Wait()
	return errs
}

// readyGauge is /readyz as a metric, so an alert sees a fleet with no
// replica able to serve (deploy/prometheus/alerts.yaml): every replica
// runs the checks when it is scraped.
func readyGauge(opts Options) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "storage_gateway_ready",
		Help: "1 when every readiness check passes (as GET /readyz answers 200), 0 otherwise."},
		func() float64 {
			for _, err := range runChecks(context.Background(), opts.Readiness, opts.ReadinessTimeout) {
				if err != nil {
					return 0
				}
			}
			return 1
		})
}

func (h *handlers) GetOpenAPI(context.Context, GetOpenAPIRequestObject) (GetOpenAPIResponseObject, error) {
	return GetOpenAPI200ApplicationyamlResponse{
		Body:          bytes.NewReader(openAPIDocument),
		ContentLength: int64(len(openAPIDocument)),
	}, nil
}
