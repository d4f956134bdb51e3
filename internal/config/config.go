// Package config owns the gateway's runtime settings: every setting comes from an
// SG_* environment variable, is parsed once at start and validated with a message
// that names the variable. It must not read files or reach the network.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
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
	// MemberID names this replica among those sharing the database
	// (internal/membership); empty: the host name, stable across restarts
	// of a pod or host, so a restart takes its own place at once.
	MemberID string `env:"SG_MEMBER_ID"`
	// AdvertiseURL is where other replicas reach this one.
	AdvertiseURL string `env:"SG_ADVERTISE_URL"`
	// MemberLease is how long a replica counts as live after its last
	// heartbeat (it heartbeats every fifth of it): a replica killed outright
	// is replaced within about a lease and a fifth.
	MemberLease time.Duration `env:"SG_MEMBER_LEASE" envDefault:"5s"`
	// ProbeInterval is how often an environment that is not READY is
	// re-probed.
	ProbeInterval time.Duration `env:"SG_PROBE_INTERVAL" envDefault:"60s"`
	// ProbeReadyInterval is how often a READY environment is re-probed: its
	// pool connection shows reachability all the time, and any request it
	// sees refused (401/403) probes it at once.
	ProbeReadyInterval time.Duration `env:"SG_PROBE_READY_INTERVAL" envDefault:"10m"`
	// ClusterQPS and ClusterBurst are the ceiling of the gateway's request
	// rate to one cluster (lists, health checks, writes, probes): a safety
	// limit, not the pace of a healthy cluster, which sets its own with 429
	// (API Priority and Fairness); the rate halves on a 429 and climbs back.
	ClusterQPS   float32 `env:"SG_CLUSTER_QPS" envDefault:"500"`
	ClusterBurst int     `env:"SG_CLUSTER_BURST" envDefault:"1000"`
	// ClusterWriteTimeout bounds each write of an API request to a cluster
	// (create, expand, delete a claim): past it the caller hears 503 and
	// the reconciler settles the outcome. Well under DCM's client timeout.
	ClusterWriteTimeout time.Duration `env:"SG_CLUSTER_WRITE_TIMEOUT" envDefault:"10s"`
	// ClusterSyncTimeout bounds a cluster's initial cache sync; after it the
	// environment is reported unreachable and keeps retrying.
	ClusterSyncTimeout time.Duration `env:"SG_CLUSTER_SYNC_TIMEOUT" envDefault:"30s"`
	// HealthUnhealthyCode is the HTTP status of an unhealthy answer on a
	// provider's /health: 200 (the body says unhealthy) or 503, for DCM
	// pollers that read only the status code.
	HealthUnhealthyCode int `env:"SG_HEALTH_UNHEALTHY_CODE" envDefault:"200"`
	// StatusDebounce is how long a volume's spent flap token (of two) takes
	// to come back: a volume reports its lifecycle at once, and flapping
	// about once per this window.
	StatusDebounce time.Duration `env:"SG_STATUS_DEBOUNCE" envDefault:"500ms"`
	// OutboxRetention is how long sent status events stay in the outbox
	// (for inspection) before they are pruned.
	OutboxRetention time.Duration `env:"SG_OUTBOX_RETENTION" envDefault:"24h"`
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
	// DCMTokenFile holds a bearer token for DCM's API (re-read as it
	// changes, e.g. a projected service account token).
	DCMTokenFile string `env:"SG_DCM_TOKEN_FILE"`
	// DCMClientID, DCMClientSecretFile and DCMTokenURL get tokens for DCM's
	// API with the OAuth 2.0 client credentials grant instead.
	DCMClientID         string `env:"SG_DCM_CLIENT_ID"`
	DCMClientSecretFile string `env:"SG_DCM_CLIENT_SECRET_FILE"`
	DCMTokenURL         string `env:"SG_DCM_TOKEN_URL"`
	// DCMAgentAPIURL is the agent API of DCM's control plane; set, every
	// environment is DCM's storage agent (its requests come over NATS);
	// empty turns the agent dispatch off. It uses the DCM credentials
	// above.
	DCMAgentAPIURL string `env:"SG_DCM_AGENT_API_URL"`
	// DCMAgentHeartbeat is how often each agent heartbeats.
	DCMAgentHeartbeat time.Duration `env:"SG_DCM_AGENT_HEARTBEAT_INTERVAL" envDefault:"30s"`
	// DCMAgentCost is the cost the agents advertise.
	DCMAgentCost string `env:"SG_DCM_AGENT_COST" envDefault:"medium"`
	// DCMAgentAckWait is how long a request delivered to an agent may stay
	// unanswered before NATS delivers it again (to the environment's
	// owner then): the bound on how late a request held by a replica that
	// died is carried out.
	DCMAgentAckWait time.Duration `env:"SG_DCM_AGENT_ACK_WAIT" envDefault:"2m"`

	// AuthMode is how API callers are authenticated: oidc, static or
	// disabled.
	AuthMode string `env:"SG_AUTH_MODE" envDefault:"static"`
	// AuthDisabledAcknowledged must be true for AuthMode disabled.
	AuthDisabledAcknowledged bool `env:"SG_AUTH_DISABLED_I_UNDERSTAND" envDefault:"false"`
	// AuthTokenFile is the static token file (hashes -> principals);
	// required by serve in static mode, re-read on SIGHUP.
	AuthTokenFile string `env:"SG_AUTH_TOKEN_FILE"`
	// AuthDCMTrustedNetworks are CIDRs whose requests without a token get the
	// dcm role (DCM's service-provider-manager sends none yet).
	AuthDCMTrustedNetworks string `env:"SG_AUTH_DCM_TRUSTED_NETWORKS"`
	// OIDCIssuerURL is the issuer of bearer JWTs in oidc mode.
	OIDCIssuerURL string `env:"SG_OIDC_ISSUER_URL"`
	// OIDCAudience must be in a token's aud.
	OIDCAudience string `env:"SG_OIDC_AUDIENCE" envDefault:"dcm-api"`
	// OIDCRoleClaims are the dotted claim paths holding role names.
	OIDCRoleClaims string `env:"SG_OIDC_ROLE_CLAIMS" envDefault:"realm_access.roles,resource_access.dcm-api.roles"`
	// OIDCRolePrefix marks the gateway's roles among a token's role names.
	OIDCRolePrefix string `env:"SG_OIDC_ROLE_PREFIX" envDefault:"storage-gateway-"`
	// OIDCEnvironmentsClaim, if set, names a claim listing the environments
	// a principal is limited to.
	OIDCEnvironmentsClaim string `env:"SG_OIDC_ENVIRONMENTS_CLAIM"`
	// OIDCSigningAlgs are the accepted JWS algorithms.
	OIDCSigningAlgs string `env:"SG_OIDC_SIGNING_ALGS" envDefault:"RS256,ES256"`
	// OIDCClockSkew is the tolerance on a token's exp, nbf and iat.
	OIDCClockSkew time.Duration `env:"SG_OIDC_CLOCK_SKEW" envDefault:"30s"`
	// OIDCMaxTokenLifetime bounds a token's exp − iat.
	OIDCMaxTokenLifetime time.Duration `env:"SG_OIDC_MAX_TOKEN_LIFETIME" envDefault:"24h"`
	// OIDCAuthorizedParties, if set, are the clients (azp) whose tokens are
	// accepted.
	OIDCAuthorizedParties string `env:"SG_OIDC_AUTHORIZED_PARTIES"`
	// AllowedHosts are the Host names the API answers to; empty accepts any
	// when authentication is on, and only loopback names when it is off.
	AllowedHosts string `env:"SG_ALLOWED_HOSTS"`
	// MetricsRequireAuth puts /metrics behind the admin or viewer role.
	MetricsRequireAuth bool `env:"SG_METRICS_REQUIRE_AUTH" envDefault:"false"`
	// AuditRetention is how long audit events are kept.
	AuditRetention time.Duration `env:"SG_AUDIT_RETENTION" envDefault:"2160h"`
	// AdminWriteRate and AdminWriteBurst limit each principal's admin writes.
	AdminWriteRate  float64 `env:"SG_ADMIN_WRITE_RATE" envDefault:"5"`
	AdminWriteBurst int     `env:"SG_ADMIN_WRITE_BURST" envDefault:"20"`
	// HTTPReadTimeout, HTTPWriteTimeout and HTTPIdleTimeout bound reading a
	// whole request, writing a response, and an idle keep-alive connection.
	HTTPReadTimeout  time.Duration `env:"SG_HTTP_READ_TIMEOUT" envDefault:"30s"`
	HTTPWriteTimeout time.Duration `env:"SG_HTTP_WRITE_TIMEOUT" envDefault:"2m"`
	HTTPIdleTimeout  time.Duration `env:"SG_HTTP_IDLE_TIMEOUT" envDefault:"2m"`
	// ProbeConcurrency caps cluster probes in flight across all environments.
	ProbeConcurrency int `env:"SG_PROBE_CONCURRENCY" envDefault:"8"`
}

// Load reads the configuration from the process environment and validates it.
func Load() (Config, error) {
	return parse(env.Options{})
}

// Variables are the names of every SG_* variable the gateway reads: what
// deployment files (the Helm chart, the quadlet units) may set.
func Variables() []string {
	params, err := env.GetFieldParams(&Config{})
	if err != nil {
		panic("config: the Config struct's tags do not parse: " + err.Error())
	}
	names := make([]string, len(params))
	for i, p := range params {
		names[i] = p.Key
	}
	return names
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
	if c.OutboxRetention < time.Minute {
		add("SG_OUTBOX_RETENTION", "must be at least 1m")
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
	if c.MemberLease < 2*time.Second {
		add("SG_MEMBER_LEASE", "must be a duration of at least 2s, e.g. 5s")
	}
	if c.AdvertiseURL != "" && !httpURL(c.AdvertiseURL) {
		add("SG_ADVERTISE_URL", "must be an http(s) URL other replicas reach this one at, e.g. http://10.1.2.3:8080")
	}
	if c.ProbeInterval < time.Second {
		add("SG_PROBE_INTERVAL", "must be a duration of at least 1s, e.g. 60s")
	}
	if c.ProbeReadyInterval < c.ProbeInterval {
		add("SG_PROBE_READY_INTERVAL", "must be a duration no shorter than SG_PROBE_INTERVAL, e.g. 10m")
	}
	if c.ClusterQPS <= 0 || c.ClusterBurst < 1 {
		add("SG_CLUSTER_QPS/SG_CLUSTER_BURST", "must be positive")
	}
	if c.ClusterWriteTimeout < time.Second || c.ClusterWriteTimeout > time.Minute {
		add("SG_CLUSTER_WRITE_TIMEOUT", "must be between 1s and 1m, e.g. 10s")
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
	if c.DCMAgentAPIURL != "" {
		if !httpURL(c.DCMAgentAPIURL) {
			add("SG_DCM_AGENT_API_URL", "must be an http(s) URL, e.g. http://dcm:8080/api/v1alpha1")
		}
		if c.DCMAgentHeartbeat < time.Second {
			add("SG_DCM_AGENT_HEARTBEAT_INTERVAL", "must be at least 1s, e.g. 30s")
		}
		if c.DCMAgentAckWait < 10*time.Second {
			add("SG_DCM_AGENT_ACK_WAIT", "must be at least 10s, e.g. 2m")
		}
		if !slices.Contains([]string{"low", "medium-low", "medium", "medium-high", "high"}, c.DCMAgentCost) {
			add("SG_DCM_AGENT_COST", "must be low, medium-low, medium, medium-high or high")
		}
	}
	if c.HealthUnhealthyCode != 200 && c.HealthUnhealthyCode != 503 {
		add("SG_HEALTH_UNHEALTHY_CODE", "must be 200 or 503")
	}
	c.validateDCMAuth(add)
	c.validateAuth(add)
	c.validateHTTP(add)
	if c.ProbeConcurrency < 1 {
		add("SG_PROBE_CONCURRENCY", "must be at least 1")
	}
	if len(problems) > 0 {
		return errors.New("invalid configuration: " + strings.Join(problems, "; "))
	}
	return nil
}

func (c Config) validateDCMAuth(add func(name, msg string)) {
	clientCreds := c.DCMClientID != "" || c.DCMClientSecretFile != "" || c.DCMTokenURL != ""
	switch {
	case clientCreds && c.DCMTokenFile != "":
		add("SG_DCM_TOKEN_FILE", "use either a token file or client credentials (SG_DCM_CLIENT_ID), not both")
	case clientCreds && (c.DCMClientID == "" || c.DCMClientSecretFile == "" || !httpURL(c.DCMTokenURL)):
		add("SG_DCM_CLIENT_ID", "client credentials need SG_DCM_CLIENT_ID, SG_DCM_CLIENT_SECRET_FILE and an http(s) SG_DCM_TOKEN_URL")
	}
}

func (c Config) validateAuth(add func(name, msg string)) {
	switch c.AuthMode {
	case "static":
	case "disabled":
		if !c.AuthDisabledAcknowledged {
			add("SG_AUTH_MODE", "disabled lets anyone who reaches the port do anything; it is refused unless SG_AUTH_DISABLED_I_UNDERSTAND=true")
		}
	case "oidc":
		if err := CheckIssuerURL(c.OIDCIssuerURL); err != nil {
			add("SG_OIDC_ISSUER_URL", err.Error())
		}
		if c.OIDCAudience == "" {
			add("SG_OIDC_AUDIENCE", "must not be empty")
		}
		if len(c.OIDCRoleClaimList()) == 0 {
			add("SG_OIDC_ROLE_CLAIMS", "must name at least one claim path, e.g. realm_access.roles")
		}
		for _, alg := range c.OIDCSigningAlgList() {
			if !slices.Contains(signingAlgs, alg) {
				add("SG_OIDC_SIGNING_ALGS", "must be a comma-separated list of "+strings.Join(signingAlgs, ", "))
				break
			}
		}
		if c.OIDCClockSkew < 0 || c.OIDCClockSkew > 5*time.Minute {
			add("SG_OIDC_CLOCK_SKEW", "must be between 0s and 5m")
		}
		if c.OIDCMaxTokenLifetime < time.Minute || c.OIDCMaxTokenLifetime > 30*24*time.Hour {
			add("SG_OIDC_MAX_TOKEN_LIFETIME", "must be between 1m and 720h")
		}
	default:
		add("SG_AUTH_MODE", "must be oidc, static or disabled")
	}
	if _, err := egress.ParseCIDRs(c.AuthDCMTrustedNetworks); err != nil {
		add("SG_AUTH_DCM_TRUSTED_NETWORKS", "must be a comma-separated list of CIDRs: "+err.Error())
	}
	for _, h := range c.AllowedHostList() {
		if !hostName.MatchString(h) {
			add("SG_ALLOWED_HOSTS", "must be a comma-separated list of host names or IP addresses (no ports)")
			break
		}
	}
	if c.AuditRetention < time.Hour {
		add("SG_AUDIT_RETENTION", "must be at least 1h, e.g. 2160h")
	}
	if c.AdminWriteRate <= 0 || c.AdminWriteBurst < 1 {
		add("SG_ADMIN_WRITE_RATE/SG_ADMIN_WRITE_BURST", "must be positive")
	}
}

func (c Config) validateHTTP(add func(name, msg string)) {
	for name, d := range map[string]time.Duration{"SG_HTTP_READ_TIMEOUT": c.HTTPReadTimeout,
		"SG_HTTP_WRITE_TIMEOUT": c.HTTPWriteTimeout, "SG_HTTP_IDLE_TIMEOUT": c.HTTPIdleTimeout} {
		if d <= 0 {
			add(name, "must be a positive duration, e.g. 30s")
		}
	}
}

// signingAlgs are the JWS algorithms an operator may allow: asymmetric ones
// only, so a token can never be "signed" with the issuer's public key.
var signingAlgs = []string{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"}

// hostName is a DNS name or an IP address, without a port.
var hostName = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$|^[0-9a-fA-F:.]+$`)

// CheckIssuerURL accepts https issuers, and http ones only on loopback (a
// development identity provider): tokens and keys must not travel in the
// clear. The CLI's login applies it too.
func CheckIssuerURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("must be the issuer URL, e.g. https://keycloak.example.com/realms/dcm (required with SG_AUTH_MODE=oidc)")
	}
	if !SecureOrLoopback(u) {
		return errors.New("must be an https URL (http only for a loopback issuer)")
	}
	return nil
}

// SecureOrLoopback reports whether u is https, or http to this machine:
// where a bearer token may be sent.
func SecureOrLoopback(u *url.URL) bool {
	if u.Scheme == "https" {
		return true
	}
	ip, err := netip.ParseAddr(u.Hostname())
	return u.Scheme == "http" && (u.Hostname() == "localhost" || err == nil && ip.IsLoopback())
}

// OIDCRoleClaimList is SG_OIDC_ROLE_CLAIMS as a list.
func (c Config) OIDCRoleClaimList() []string { return splitList(c.OIDCRoleClaims) }

// OIDCAuthorizedPartyList is SG_OIDC_AUTHORIZED_PARTIES as a list.
func (c Config) OIDCAuthorizedPartyList() []string { return splitList(c.OIDCAuthorizedParties) }

// OIDCSigningAlgList is SG_OIDC_SIGNING_ALGS as a list.
func (c Config) OIDCSigningAlgList() []string { return splitList(c.OIDCSigningAlgs) }

// AllowedHostList is SG_ALLOWED_HOSTS as a list.
func (c Config) AllowedHostList() []string { return splitList(c.AllowedHosts) }

// DCMTrustedNetworks is SG_AUTH_DCM_TRUSTED_NETWORKS (validated by Validate).
func (c Config) DCMTrustedNetworks() []netip.Prefix {
	nets, _ := egress.ParseCIDRs(c.AuthDCMTrustedNetworks)
	return nets
}

// splitList splits a comma-separated setting, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
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

// Member is SG_MEMBER_ID, or the host name when it is unset.
func (c Config) Member() (string, error) {
	if c.MemberID != "" {
		return c.MemberID, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("SG_MEMBER_ID: unset and the host name is unknown; set it: %w", err)
	}
	if host == "" {
		return "", errors.New("SG_MEMBER_ID: unset and the host name is empty; set it")
	}
	return host, nil
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
