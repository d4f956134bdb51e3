// Package config owns the gateway's runtime settings: every setting comes from an
// SG_* environment variable, is parsed once at start and validated with a message
// that names the variable. It must not read files or reach the network.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/egress"
)

// EmbeddedNATSListenOff disables the embedded NATS server's TCP listener; the
// gateway then reaches it only through its in-process connection.
const EmbeddedNATSListenOff = "off"

// Config is the gateway's whole configuration. Field tags are the single source
// of the variable names and defaults; the README table mirrors them.
type Config struct {
	// ListenAddr is where the HTTP API, health and metrics endpoints listen.
	ListenAddr string `env:"SG_LISTEN_ADDR" envDefault:":8080"`
	// DatabaseURL is the Postgres connection URL (libpq URL or key=value form).
	DatabaseURL string `env:"SG_DATABASE_URL" envDefault:"postgres://postgres@127.0.0.1:5432/storage_gateway?sslmode=disable"`
	// MigrateOnStart applies pending schema migrations before serving.
	MigrateOnStart bool `env:"SG_MIGRATE_ON_START" envDefault:"true"`
	// NATSURL selects an external NATS server; empty starts an embedded one.
	NATSURL string `env:"SG_NATS_URL"`
	// EmbeddedNATSListen is the TCP address of the embedded NATS server (only
	// used when NATSURL is empty). It defaults to loopback on 4223 so it never
	// collides with a system NATS on 4222; "off" keeps it in-process only.
	EmbeddedNATSListen string `env:"SG_EMBEDDED_NATS_LISTEN" envDefault:"127.0.0.1:4223"`
	// StateDir holds local state such as the embedded NATS JetStream store.
	StateDir string `env:"SG_STATE_DIR"`
	// LogLevel is one of debug, info, warn, error.
	LogLevel string `env:"SG_LOG_LEVEL" envDefault:"info"`
	// ShutdownTimeout bounds graceful shutdown after SIGTERM/SIGINT.
	ShutdownTimeout time.Duration `env:"SG_SHUTDOWN_TIMEOUT" envDefault:"30s"`
	// KeyRingFile is the JSON key ring that seals cluster credentials at rest.
	// `serve` refuses to run without it.
	KeyRingFile string `env:"SG_KEY_RING_FILE"`
	// AllowedClusterCIDRs are the private ranges (and, for local development
	// only, loopback) cluster API servers may resolve to; link-local,
	// metadata, unspecified and multicast addresses are refused regardless.
	// The default must equal egress.DefaultAllowedCIDRs (a test checks it).
	AllowedClusterCIDRs string `env:"SG_ALLOWED_CLUSTER_CIDRS" envDefault:"10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"`
	// AllowInsecureClusters accepts clusters registered without TLS verification.
	AllowInsecureClusters bool `env:"SG_ALLOW_INSECURE_CLUSTERS" envDefault:"false"`
	// ProbeTimeout bounds one cluster probe (version + access reviews).
	ProbeTimeout time.Duration `env:"SG_PROBE_TIMEOUT" envDefault:"10s"`
	// ProbeInterval is how often every environment is re-probed.
	ProbeInterval time.Duration `env:"SG_PROBE_INTERVAL" envDefault:"60s"`
	// ClusterQPS and ClusterBurst rate-limit the gateway's requests to one
	// cluster (writes, watches, health checks).
	ClusterQPS   float32 `env:"SG_CLUSTER_QPS" envDefault:"20"`
	ClusterBurst int     `env:"SG_CLUSTER_BURST" envDefault:"40"`
	// ClusterSyncTimeout bounds a cluster's initial cache sync; after it the
	// environment is reported unreachable and keeps retrying.
	ClusterSyncTimeout time.Duration `env:"SG_CLUSTER_SYNC_TIMEOUT" envDefault:"30s"`
	// HealthUnhealthyCode is the HTTP status of an unhealthy answer on a
	// provider's /health: 200 (the body says unhealthy) or 503, for DCM
	// pollers that read only the status code.
	HealthUnhealthyCode int `env:"SG_HEALTH_UNHEALTHY_CODE" envDefault:"200"`
	// StatusDebounce is the window in which further status changes of a
	// volume are coalesced after one was reported at once.
	StatusDebounce time.Duration `env:"SG_STATUS_DEBOUNCE" envDefault:"500ms"`
	// ProvisioningTimeout is how long provisioning may fail continuously
	// before a volume is reported FAILED.
	ProvisioningTimeout time.Duration `env:"SG_PROVISIONING_TIMEOUT" envDefault:"10m"`
	// DCMRegistrationURL is DCM's service-provider-manager API; empty turns
	// provider registration off.
	DCMRegistrationURL string `env:"SG_DCM_REGISTRATION_URL"`
	// PublicURL is the gateway's base URL as DCM reaches it (provider
	// endpoints are built from it).
	PublicURL string `env:"SG_PUBLIC_URL"`
	// DCMRegistrationInterval renews every registration.
	DCMRegistrationInterval time.Duration `env:"SG_DCM_REGISTRATION_INTERVAL" envDefault:"5m"`
}

// Load reads the configuration from the process environment and validates it.
func Load() (Config, error) {
	return parse(env.Options{})
}

// FromMap reads the configuration from the given variables instead of the
// process environment (used by tests and tools that assemble a config).
func FromMap(vars map[string]string) (Config, error) {
	return parse(env.Options{Environment: vars})
}

func parse(opts env.Options) (Config, error) {
	var cfg Config
	if err := env.ParseWithOptions(&cfg, opts); err != nil {
		return Config{}, describeParseError(err)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir(opts.Environment)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// describeParseError rewrites the library's errors so they name the variable
// but never repeat its value (a URL may carry a password).
func describeParseError(err error) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	msgs := make([]string, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			msgs = append(msgs, fmt.Sprintf("%s: must be a valid %s", envName(pe.Name), pe.Type))
			continue
		}
		msgs = append(msgs, e.Error())
	}
	return errors.New("invalid configuration: " + strings.Join(msgs, "; "))
}

// envName maps a Config field name to its SG_* variable for error messages.
func envName(field string) string {
	if f, ok := reflect.TypeFor[Config]().FieldByName(field); ok {
		return f.Tag.Get("env")
	}
	return field
}

// Validate checks every setting and reports all problems at once.
func (c Config) Validate() error {
	var problems []string
	add := func(name, msg string) { problems = append(problems, name+": "+msg) }

	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		add("SG_LISTEN_ADDR", "must be host:port (host may be empty), e.g. :8080")
	} else if err := validPort(c.ListenAddr); err != nil {
		add("SG_LISTEN_ADDR", err.Error())
	}
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil || c.DatabaseURL == "" {
		// Never echo the URL: it may contain a password.
		add("SG_DATABASE_URL", "must be a Postgres connection URL, e.g. postgres://user@host:5432/db")
	}
	if c.NATSURL != "" {
		if err := validNATSURL(c.NATSURL); err != nil {
			add("SG_NATS_URL", err.Error())
		}
	} else if c.EmbeddedNATSListen != EmbeddedNATSListenOff {
		if err := validPort(c.EmbeddedNATSListen); err != nil {
			add("SG_EMBEDDED_NATS_LISTEN", err.Error()+` (or "off")`)
		}
	}
	if c.StateDir == "" {
		add("SG_STATE_DIR", "must be set when neither XDG_STATE_HOME nor HOME is")
	}
	if _, err := c.SlogLevel(); err != nil {
		add("SG_LOG_LEVEL", err.Error())
	}
	if c.ShutdownTimeout <= 0 {
		add("SG_SHUTDOWN_TIMEOUT", "must be a positive duration, e.g. 30s")
	}
	if _, err := egress.ParseCIDRs(c.AllowedClusterCIDRs); err != nil {
		add("SG_ALLOWED_CLUSTER_CIDRS", "must be a comma-separated list of CIDRs: "+err.Error())
	}
	if c.ProbeTimeout <= 0 {
		add("SG_PROBE_TIMEOUT", "must be a positive duration, e.g. 10s")
	}
	if c.ProbeInterval < time.Second {
		add("SG_PROBE_INTERVAL", "must be a duration of at least 1s, e.g. 60s")
	}
	if c.ClusterQPS <= 0 || c.ClusterBurst < 1 {
		add("SG_CLUSTER_QPS/SG_CLUSTER_BURST", "must be positive")
	}
	if c.ClusterSyncTimeout <= 0 {
		add("SG_CLUSTER_SYNC_TIMEOUT", "must be a positive duration, e.g. 30s")
	}
	if c.StatusDebounce < 0 {
		add("SG_STATUS_DEBOUNCE", "must not be negative, e.g. 500ms")
	}
	if c.ProvisioningTimeout <= 0 {
		add("SG_PROVISIONING_TIMEOUT", "must be a positive duration, e.g. 10m")
	}
	if c.DCMRegistrationURL != "" {
		if !httpURL(c.DCMRegistrationURL) {
			add("SG_DCM_REGISTRATION_URL", "must be an http(s) URL, e.g. http://dcm:8080/api/v1alpha1")
		}
		if !httpURL(c.PublicURL) {
			add("SG_PUBLIC_URL", "must be the gateway's http(s) base URL as DCM reaches it (required with SG_DCM_REGISTRATION_URL)")
		}
		if c.DCMRegistrationInterval < time.Second {
			add("SG_DCM_REGISTRATION_INTERVAL", "must be at least 1s, e.g. 5m")
		}
	}
	if c.HealthUnhealthyCode != 200 && c.HealthUnhealthyCode != 503 {
		add("SG_HEALTH_UNHEALTHY_CODE", "must be 200 or 503")
	}
	if len(problems) > 0 {
		return errors.New("invalid configuration: " + strings.Join(problems, "; "))
	}
	return nil
}

// SlogLevel converts LogLevel into a slog level.
func (c Config) SlogLevel() (slog.Level, error) {
	switch strings.ToLower(c.LogLevel) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, errors.New("must be one of debug, info, warn, error")
}

// EgressPolicy is the dial policy for cluster connections (the CIDR list was
// validated by Validate).
func (c Config) EgressPolicy() egress.Policy {
	allowed, _ := egress.ParseCIDRs(c.AllowedClusterCIDRs)
	return egress.Policy{Allowed: allowed}
}

// EmbeddedNATSDir is where the embedded NATS server keeps its JetStream store.
func (c Config) EmbeddedNATSDir() string { return filepath.Join(c.StateDir, "nats") }

func validPort(hostport string) error {
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return errors.New("must be host:port")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return errors.New("port must be a number from 0 to 65535")
	}
	return nil
}

func httpURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func validNATSURL(raw string) error {
	for _, one := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil || u.Host == "" {
			return errors.New("must be a comma-separated list of nats://host:port URLs")
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return errors.New("scheme must be nats, tls, ws or wss")
		}
	}
	return nil
}

// defaultStateDir follows the XDG base directory convention.
func defaultStateDir(vars map[string]string) string {
	get := os.Getenv
	if vars != nil {
		get = func(k string) string { return vars[k] }
	}
	if d := get("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "storage-gateway")
	}
	if h := get("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "storage-gateway")
	}
	return ""
}
