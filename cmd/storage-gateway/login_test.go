package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/oidctest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// TestLoginWithTheDeviceFlowThenUseTheAPI: `login` runs the OAuth 2.0 device
// authorization grant against the issuer, shows where to confirm, keeps the
// token in the user's config directory (0600), and the CLI then calls a
// gateway in OIDC mode with it — refreshing it once it has expired.
func TestLoginWithTheDeviceFlowThenUseTheAPI(t *testing.T) {
	issuer := oidctest.Start(t)
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": pgtest.NewDatabase(t).URL,
		"SG_AUTH_MODE": "oidc", "SG_OIDC_ISSUER_URL": issuer.URL})
	config := t.TempDir()
	cli := []string{"XDG_CONFIG_HOME=" + config, "SG_GATEWAY_URL=http://" + g.Addr}

	out := mustRun(t, cli, "login", "--issuer", issuer.URL, "--client-id", "storage-gateway-cli")
	if !strings.Contains(out, issuer.URL+"/activate") || !strings.Contains(out, "ABCD-EFGH") || !strings.Contains(out, "signed in") {
		t.Fatalf("login output:\n%s", out)
	}
	file := filepath.Join(config, "storage-gateway", "login.json")
	info, err := os.Stat(file)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("saved login: %v %v", info, err)
	}
	if strings.Contains(out, readToken(t, file)) {
		t.Fatal("login printed the token")
	}
	if out := mustRun(t, cli, "env", "list", "-o", "json"); len(listItems[any](t, out)) != 0 {
		t.Fatalf("env list with the saved login: %s", out)
	}
	// The saved token (DCM accepts it too) travels only over TLS or loopback.
	remote := []string{"XDG_CONFIG_HOME=" + config, "SG_GATEWAY_URL=http://gateway.example.com:8080"}
	if out, err := run(t, remote, "env", "list"); err == nil || !strings.Contains(out, "https") {
		t.Fatalf("the saved login sent to a plain-http remote gateway: %v\n%s", err, out)
	}

	// A login whose token has expired is refreshed on first use.
	issuer.SetTokenLifetime(5 * time.Second) // within oauth2's 10 s margin: expired at once
	mustRun(t, cli, "login", "--issuer", issuer.URL)
	before, requests := readToken(t, file), issuer.TokenRequests()
	mustRun(t, cli, "env", "list")
	if readToken(t, file) == before || issuer.TokenRequests() != requests+1 {
		t.Fatalf("the expired token was not refreshed (%d token requests)", issuer.TokenRequests()-requests)
	}

	// Without a login (or a token) the CLI is refused; logout forgets it.
	mustRun(t, cli, "logout")
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("logout left %s: %v", file, err)
	}
	if out, err := run(t, cli, "env", "list"); err == nil || !strings.Contains(out, "UNAUTHENTICATED") {
		t.Fatalf("env list without a login: %v\n%s", err, out)
	}
	if out, err := run(t, cli, "login", "--issuer", "http://issuer.example.com"); err == nil || !strings.Contains(out, "https") {
		t.Fatalf("login to a plain-http remote issuer: %v\n%s", err, out)
	}
}

func readToken(t *testing.T, file string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var saved struct {
		Token struct {
			AccessToken string `json:"access_token"`
		} `json:"token"`
	}
	if err := json.Unmarshal(raw, &saved); err != nil || saved.Token.AccessToken == "" {
		t.Fatalf("saved login: %v", err)
	}
	return saved.Token.AccessToken
}

// TestAuditCommand: `audit` prints the trail of the gateway's admin actions,
// filtered, as a table or JSON.
func TestAuditCommand(t *testing.T) {
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": pgtest.NewDatabase(t).URL})
	cli := []string{"SG_GATEWAY_URL=http://" + g.Addr, "SG_GATEWAY_TOKEN=" + g.Token()}
	if out, err := run(t, cli, "env", "rm", "nowhere"); err == nil {
		t.Fatalf("removing an unknown environment succeeded:\n%s", out)
	}
	out := mustRun(t, cli, "audit", "-o", "json", "--since", "1h", "--action", "deleteEnvironment")
	events := listItems[struct {
		Action, Subject, EnvironmentID string
		Status                         int
	}](t, strings.ReplaceAll(out, "environment_id", "environmentid"))
	if len(events) != 1 || events[0].Subject != "test-admin" || events[0].EnvironmentID != "nowhere" || events[0].Status != 404 {
		t.Fatalf("audit events: %+v", events)
	}
	if out := mustRun(t, cli, "audit", "-o", "name", "--action", "deleteEnvironment"); !regexp.MustCompile(`^auditevent/\d+\n$`).MatchString(out) {
		t.Fatalf("audit -o name: %q", out)
	}
	// The caller's name is headed as such.
	if out := mustRun(t, cli, "audit", "-o", "wide", "--action", "deleteEnvironment"); !strings.Contains(out, "SUBJECT NAME") ||
		strings.Contains(out, "EVENT") || !strings.Contains(out, "nowhere") {
		t.Fatalf("audit -o wide:\n%s", out)
	}
	table := mustRun(t, cli, "audit", "--subject", "test-admin")
	if !strings.Contains(table, "deleteEnvironment") || !strings.Contains(table, "nowhere") || !strings.Contains(table, "404") {
		t.Fatalf("audit table:\n%s", table)
	}
	if out := mustRun(t, cli, "audit", "--action", "createVolume"); strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("a filter that matches nothing printed rows:\n%s", out)
	}
	if out, err := run(t, cli, "audit", "--since", "1h", "--until", "2h"); err == nil || !strings.Contains(out, "--until: must not be before --since") {
		t.Fatalf("--until before --since: %v\n%s", err, out)
	}
	if out, err := run(t, cli, "audit", "--since", "yesterday"); err == nil || !strings.Contains(out, "--since") {
		t.Fatalf("a bad --since: %v\n%s", err, out)
	}
}
