package config_test

import (
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/egress"
)

func TestDefaults(t *testing.T) {
	cfg, err := config.FromMap(map[string]string{"HOME": "/home/op"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ListenAddr != ":8080" || !cfg.MigrateOnStart || cfg.NATSURL != "" || cfg.ShutdownTimeout != 30*time.Second {
		t.Fatalf("unexpected defaults: %+v", cfg)
	}
	if cfg.EmbeddedNATSListen != "127.0.0.1:4223" {
		t.Fatalf("embedded NATS must default to loopback off 4222, got %q", cfg.EmbeddedNATSListen)
	}
	if cfg.StateDir != "/home/op/.local/state/storage-gateway" {
		t.Fatalf("state dir %q", cfg.StateDir)
	}
	if cfg.EmbeddedNATSDir() != "/home/op/.local/state/storage-gateway/nats" {
		t.Fatalf("NATS store %q", cfg.EmbeddedNATSDir())
	}
	if cfg.AllowedClusterCIDRs != egress.DefaultAllowedCIDRs || cfg.AllowInsecureClusters ||
		cfg.ProbeTimeout != 10*time.Second || cfg.ProbeInterval != time.Minute || cfg.KeyRingFile != "" {
		t.Fatalf("unexpected registry defaults: %+v", cfg)
	}
	// Production never dials loopback unless an operator lists it.
	if err := cfg.EgressPolicy().Check(netip.MustParseAddr("127.0.0.1")); err == nil {
		t.Fatal("the default policy allows loopback")
	}
}

func TestInvalidRegistrySettingsNameTheVariable(t *testing.T) {
	_, err := config.FromMap(map[string]string{"HOME": "/h", "SG_ALLOWED_CLUSTER_CIDRS": "10.0.0.0/8,nonsense",
		"SG_PROBE_TIMEOUT": "0s", "SG_PROBE_INTERVAL": "10ms"})
	for _, want := range []string{"SG_ALLOWED_CLUSTER_CIDRS", "SG_PROBE_TIMEOUT", "SG_PROBE_INTERVAL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not name %s", err, want)
		}
	}
}

func TestStateDirFollowsXDG(t *testing.T) {
	cfg, err := config.FromMap(map[string]string{"HOME": "/home/op", "XDG_STATE_HOME": "/xdg"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StateDir != "/xdg/storage-gateway" {
		t.Fatalf("state dir %q", cfg.StateDir)
	}
}

func TestValidValues(t *testing.T) {
	cfg, err := config.FromMap(map[string]string{
		"SG_LISTEN_ADDR":          "127.0.0.1:9999",
		"SG_DATABASE_URL":         "host=db user=sg dbname=sg",
		"SG_NATS_URL":             "nats://a:4222, tls://b:4222",
		"SG_STATE_DIR":            "/var/lib/sg",
		"SG_LOG_LEVEL":            "DEBUG",
		"SG_SHUTDOWN_TIMEOUT":     "5s",
		"SG_MIGRATE_ON_START":     "false",
		"SG_EMBEDDED_NATS_LISTEN": "off",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MigrateOnStart || cfg.ShutdownTimeout != 5*time.Second || cfg.StateDir != "/var/lib/sg" ||
		cfg.ListenAddr != "127.0.0.1:9999" || cfg.DatabaseURL != "host=db user=sg dbname=sg" ||
		cfg.NATSURL != "nats://a:4222, tls://b:4222" || cfg.EmbeddedNATSListen != config.EmbeddedNATSListenOff {
		t.Fatalf("values not applied: %+v", cfg)
	}
	if level, err := cfg.SlogLevel(); err != nil || level != slog.LevelDebug {
		t.Fatalf("log level DEBUG = %v, %v", level, err)
	}
}

// TestInvalidValuesNameTheVariable checks every problem is reported with the
// variable's name and without echoing the value (which may be a secret).
func TestInvalidValuesNameTheVariable(t *testing.T) {
	const secret = "s3cr3t-value"
	cases := []struct {
		name, variable, value string
	}{
		{"listen without port", "SG_LISTEN_ADDR", "localhost" + secret},
		{"listen port not a number", "SG_LISTEN_ADDR", ":http" + secret},
		{"database URL garbage", "SG_DATABASE_URL", "postgres://u:" + secret + "@h:notaport/db"},
		{"NATS scheme", "SG_NATS_URL", "http://u:" + secret + "@nats:4222"},
		{"NATS without host", "SG_NATS_URL", "nats://"},
		{"embedded listen", "SG_EMBEDDED_NATS_LISTEN", "nowhere" + secret},
		{"log level", "SG_LOG_LEVEL", "loud" + secret},
		{"shutdown timeout unparsable", "SG_SHUTDOWN_TIMEOUT", "soon" + secret},
		{"shutdown timeout zero", "SG_SHUTDOWN_TIMEOUT", "0s"},
		{"migrate flag", "SG_MIGRATE_ON_START", "perhaps" + secret},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.FromMap(map[string]string{"HOME": "/h", tc.variable: tc.value})
			if err == nil {
				t.Fatalf("%s=%q accepted", tc.variable, tc.value)
			}
			if !strings.Contains(err.Error(), tc.variable) {
				t.Errorf("error %q does not name %s", err, tc.variable)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q echoes the value", err)
			}
		})
	}
}

func TestAllProblemsReportedTogether(t *testing.T) {
	_, err := config.FromMap(map[string]string{"HOME": "/h", "SG_LISTEN_ADDR": "x", "SG_LOG_LEVEL": "x"})
	if err == nil || !strings.Contains(err.Error(), "SG_LISTEN_ADDR") || !strings.Contains(err.Error(), "SG_LOG_LEVEL") {
		t.Fatalf("want both problems in one error, got %v", err)
	}
}

func TestStateDirRequiredWithoutHome(t *testing.T) {
	_, err := config.FromMap(map[string]string{})
	if err == nil || !strings.Contains(err.Error(), "SG_STATE_DIR") {
		t.Fatalf("want SG_STATE_DIR error without HOME, got %v", err)
	}
}

func TestAuthDefaults(t *testing.T) {
	cfg, err := config.FromMap(map[string]string{"HOME": "/h"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AuthMode != "static" || cfg.AuthDisabledAcknowledged || cfg.OIDCAudience != "dcm-api" || cfg.OIDCRolePrefix != "storage-gateway-" ||
		strings.Join(cfg.OIDCRoleClaimList(), " ") != "realm_access.roles resource_access.dcm-api.roles" ||
		strings.Join(cfg.OIDCSigningAlgList(), " ") != "RS256 ES256" || cfg.OIDCClockSkew != 30*time.Second ||
		len(cfg.DCMTrustedNetworks()) != 0 || cfg.AuditRetention != 90*24*time.Hour || cfg.MetricsRequireAuth ||
		cfg.AdminWriteRate != 5 || cfg.AdminWriteBurst != 20 || cfg.HTTPReadTimeout != 30*time.Second ||
		cfg.HTTPWriteTimeout != 2*time.Minute || cfg.HTTPIdleTimeout != 2*time.Minute || cfg.ProbeConcurrency != 8 {
		t.Fatalf("unexpected auth defaults: %+v", cfg)
	}
}

func TestAuthSettingsAreValidated(t *testing.T) {
	for name, tc := range map[string]struct {
		vars map[string]string
		want string // "" means valid
	}{
		"disabled without the acknowledgement": {map[string]string{"SG_AUTH_MODE": "disabled"}, "SG_AUTH_DISABLED_I_UNDERSTAND"},
		"disabled, acknowledged":               {map[string]string{"SG_AUTH_MODE": "disabled", "SG_AUTH_DISABLED_I_UNDERSTAND": "true"}, ""},
		"unknown mode":                         {map[string]string{"SG_AUTH_MODE": "ldap"}, "SG_AUTH_MODE"},
		"oidc without an issuer":               {map[string]string{"SG_AUTH_MODE": "oidc"}, "SG_OIDC_ISSUER_URL"},
		"oidc over plain http":                 {map[string]string{"SG_AUTH_MODE": "oidc", "SG_OIDC_ISSUER_URL": "http://keycloak.example.com/realms/dcm"}, "SG_OIDC_ISSUER_URL"},
		"oidc over http on loopback":           {map[string]string{"SG_AUTH_MODE": "oidc", "SG_OIDC_ISSUER_URL": "http://127.0.0.1:8180/realms/dcm"}, ""},
		"oidc with a symmetric algorithm":      {map[string]string{"SG_AUTH_MODE": "oidc", "SG_OIDC_ISSUER_URL": "https://kc/realms/dcm", "SG_OIDC_SIGNING_ALGS": "RS256,HS256"}, "SG_OIDC_SIGNING_ALGS"},
		"oidc with alg none":                   {map[string]string{"SG_AUTH_MODE": "oidc", "SG_OIDC_ISSUER_URL": "https://kc/realms/dcm", "SG_OIDC_SIGNING_ALGS": "none"}, "SG_OIDC_SIGNING_ALGS"},
		"oidc with a huge skew":                {map[string]string{"SG_AUTH_MODE": "oidc", "SG_OIDC_ISSUER_URL": "https://kc/realms/dcm", "SG_OIDC_CLOCK_SKEW": "1h"}, "SG_OIDC_CLOCK_SKEW"},
		"oidc without role claims":             {map[string]string{"SG_AUTH_MODE": "oidc", "SG_OIDC_ISSUER_URL": "https://kc/realms/dcm", "SG_OIDC_ROLE_CLAIMS": " , "}, "SG_OIDC_ROLE_CLAIMS"},
		"bad trusted networks":                 {map[string]string{"SG_AUTH_DCM_TRUSTED_NETWORKS": "10.0.0.0/8,anywhere"}, "SG_AUTH_DCM_TRUSTED_NETWORKS"},
		"trusted networks":                     {map[string]string{"SG_AUTH_DCM_TRUSTED_NETWORKS": "10.0.0.0/8, 127.0.0.1/32"}, ""},
		"a port in allowed hosts":              {map[string]string{"SG_ALLOWED_HOSTS": "gateway.example.com:8080"}, "SG_ALLOWED_HOSTS"},
		"allowed hosts":                        {map[string]string{"SG_ALLOWED_HOSTS": "gateway.example.com, 10.0.0.7"}, ""},
		"short retention":                      {map[string]string{"SG_AUDIT_RETENTION": "10m"}, "SG_AUDIT_RETENTION"},
		"no admin writes":                      {map[string]string{"SG_ADMIN_WRITE_RATE": "0"}, "SG_ADMIN_WRITE_RATE"},
		"no read timeout":                      {map[string]string{"SG_HTTP_READ_TIMEOUT": "0s"}, "SG_HTTP_READ_TIMEOUT"},
		"no probes":                            {map[string]string{"SG_PROBE_CONCURRENCY": "0"}, "SG_PROBE_CONCURRENCY"},
		"DCM token file and client":            {map[string]string{"SG_DCM_TOKEN_FILE": "/t", "SG_DCM_CLIENT_ID": "gw"}, "SG_DCM_TOKEN_FILE"},
		"DCM agents":                           {map[string]string{"SG_DCM_AGENT_API_URL": "http://dcm:8080/api/v1alpha1"}, ""},
		"DCM agents not at a URL":              {map[string]string{"SG_DCM_AGENT_API_URL": "dcm:8080"}, "SG_DCM_AGENT_API_URL"},
		"DCM agents at an unknown cost":        {map[string]string{"SG_DCM_AGENT_API_URL": "http://dcm/api/v1alpha1", "SG_DCM_AGENT_COST": "free"}, "SG_DCM_AGENT_COST"},
		"DCM agents beating too fast":          {map[string]string{"SG_DCM_AGENT_API_URL": "http://dcm/api/v1alpha1", "SG_DCM_AGENT_HEARTBEAT_INTERVAL": "10ms"}, "SG_DCM_AGENT_HEARTBEAT_INTERVAL"},
		"DCM client without a secret":          {map[string]string{"SG_DCM_CLIENT_ID": "gw", "SG_DCM_TOKEN_URL": "https://kc/token"}, "SG_DCM_CLIENT_ID"},
		"DCM client credentials": {map[string]string{"SG_DCM_CLIENT_ID": "gw", "SG_DCM_CLIENT_SECRET_FILE": "/s",
			"SG_DCM_TOKEN_URL": "https://kc/realms/dcm/protocol/openid-connect/token"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			vars := map[string]string{"HOME": "/h"}
			for k, v := range tc.vars {
				vars[k] = v
			}
			_, err := config.FromMap(vars)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v does not name %s", err, tc.want)
			}
		})
	}
}

// Variables names every variable the gateway reads — each changes what
// Load returns — and the README's configuration table documents each.
func TestVariablesAreReadAndDocumented(t *testing.T) {
	names := config.Variables()
	if len(names) < 40 || !slices.Contains(names, "SG_DATABASE_URL") {
		t.Fatalf("Variables() = %v", names)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("%s is not in the README's configuration table", name)
		}
	}
	base, err := config.FromMap(map[string]string{"HOME": "/home/op", "SG_LOG_LEVEL": "warn"})
	if err != nil {
		t.Fatal(err)
	}
	changed, err := config.FromMap(map[string]string{"HOME": "/home/op", "SG_LOG_LEVEL": "error"})
	if err != nil || base.LogLevel == changed.LogLevel {
		t.Fatalf("SG_LOG_LEVEL is named but not read (%v)", err)
	}
}
