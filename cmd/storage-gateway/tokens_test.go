package main_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// authGet calls the gateway's API with token (none if empty) and returns
// the status.
func (g *gateway) authGet(t *testing.T, path, token string) int {
	t.Helper()
	status, _ := g.request(t, http.MethodGet, path, token, nil)
	return status
}

// TestTokensCommands: create prints the token once (last line) and stores
// only its hash, in a 0600 file; list shows who and what, never a token or
// hash; revoke removes it; a running gateway picks each change up on SIGHUP.
func TestTokensCommands(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	env := []string{"SG_AUTH_TOKEN_FILE=" + file}
	viewer := gatewayproc.LastLine(mustRun(t, env, "tokens", "create", "--role", "viewer", "--subject", "dashboards", "--environments", "east,west"))
	admin := gatewayproc.LastLine(mustRun(t, env, "tokens", "create", "--role", "admin", "--role", "viewer", "--subject", "alice"))
	older := gatewayproc.LastLine(mustRun(t, env, "tokens", "create", "--role", "viewer", "--subject", "alice"))
	if !strings.HasPrefix(viewer, "sgw_") || !strings.HasPrefix(admin, "sgw_") || viewer == admin {
		t.Fatalf("tokens %q %q", viewer, admin)
	}
	info, err := os.Stat(file)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", info, err)
	}
	raw, err := os.ReadFile(file)
	if err != nil || strings.Contains(string(raw), viewer) || strings.Contains(string(raw), admin) {
		t.Fatalf("the token file holds a token (or is unreadable: %v)", err)
	}

	table := mustRun(t, env, "tokens", "list")
	if !strings.Contains(table, "dashboards") || !strings.Contains(table, "east, west") || !strings.Contains(table, "admin,viewer") {
		t.Fatalf("tokens list:\n%s", table)
	}
	out := mustRun(t, env, "tokens", "list", "-o", "json")
	listed := listItems[struct {
		ID           string   `json:"id"`
		Subject      string   `json:"subject"`
		Environments []string `json:"environments"`
	}](t, out)
	if len(listed) != 3 || listed[0].Subject != "dashboards" {
		t.Fatalf("tokens list -o json:\n%s", out)
	}
	yamlOut := mustRun(t, env, "tokens", "list", "-o", "yaml")
	names := mustRun(t, env, "tokens", "list", "-o", "name")
	if !strings.Contains(yamlOut, "kind: List") || !strings.Contains(yamlOut, "- create_time:") || !strings.Contains(yamlOut, "subject: dashboards") ||
		!strings.HasPrefix(names, "token/"+listed[0].ID+"\n") || strings.Count(names, "\n") != 3 {
		t.Fatalf("tokens list -o yaml:\n%s\n-o name:\n%s", yamlOut, names)
	}
	for _, secret := range []string{viewer, admin, "sha256"} {
		if strings.Contains(table+out+yamlOut, secret) {
			t.Fatalf("tokens list shows %q", secret)
		}
	}
	for _, args := range [][]string{
		{"tokens", "create", "--role", "root", "--subject", "x"},
		{"tokens", "create", "--subject", "x"},
		{"tokens", "create", "--role", "admin"},
		{"tokens", "create", "--role", "admin", "--subject", "x", "--environments", "Not_An_Id"},
		{"tokens", "revoke", "nosuchtoken"},
	} {
		if out, err := run(t, env, args...); err == nil {
			t.Errorf("%v succeeded:\n%s", args, out)
		}
	}

	g := startGateway(t, map[string]string{"SG_DATABASE_URL": pgtest.NewDatabase(t).URL, "SG_AUTH_TOKEN_FILE": file})
	if code := g.authGet(t, "/api/v1alpha1/environments", admin); code != http.StatusOK {
		t.Fatalf("admin token: %d", code)
	}
	// --replace revokes alice's other token; the gateway still accepts it
	// until it is told to reload.
	second := gatewayproc.LastLine(mustRun(t, env, "tokens", "create", "--role", "admin", "--subject", "alice", "--replace"))
	if out := mustRun(t, env, "tokens", "list"); strings.Count(out, "alice") != 1 {
		t.Fatalf("--replace left other tokens of alice:\n%s", out)
	}
	if code := g.authGet(t, "/api/v1alpha1/environments", admin); code != http.StatusOK {
		t.Fatalf("the old token before SIGHUP: %d", code)
	}
	if err := g.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.WaitLog(t, "tokens reloaded", 10*time.Second)
	for _, replaced := range []string{admin, older} {
		if code := g.authGet(t, "/api/v1alpha1/environments", replaced); code != http.StatusUnauthorized {
			t.Fatalf("a replaced token after SIGHUP: %d", code)
		}
	}
	if code := g.authGet(t, "/api/v1alpha1/environments", second); code != http.StatusOK {
		t.Fatalf("the new token after SIGHUP: %d", code)
	}
	id := listed[0].ID
	mustRun(t, env, "tokens", "revoke", id)
	if err := g.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "a revoked token refused after SIGHUP", func() bool {
		return g.authGet(t, "/api/v1alpha1/volumes", viewer) == http.StatusUnauthorized
	})
	for _, token := range []string{viewer, admin, older, second} {
		if strings.Contains(g.Logs(), token) {
			t.Fatal("a token reached the gateway's log")
		}
	}
}

// TestDisabledAuthenticationIsRefusedUnlessAcknowledgedAndThenLoud: the
// escape hatch needs a second setting, and is then logged at ERROR and shown
// in /readyz.
func TestDisabledAuthenticationIsRefusedUnlessAcknowledgedAndThenLoud(t *testing.T) {
	db := pgtest.NewDatabase(t)
	out, err := run(t, []string{"SG_DATABASE_URL=" + db.URL, "SG_AUTH_MODE=disabled", "SG_KEY_RING_FILE=" + newKeyRing(t)}, "serve")
	if err == nil || !strings.Contains(out, "SG_AUTH_DISABLED_I_UNDERSTAND") {
		t.Fatalf("serve with authentication disabled but not acknowledged: %v\n%s", err, out)
	}
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": db.URL, "SG_AUTH_MODE": "disabled", "SG_AUTH_DISABLED_I_UNDERSTAND": "true"})
	if !strings.Contains(g.Logs(), `"level":"ERROR","msg":"AUTHENTICATION IS DISABLED`) {
		t.Fatalf("no loud warning:\n%s", g.Logs())
	}
	if body := g.waitReady(t, http.StatusOK, 10*time.Second); !strings.Contains(body, `"auth_mode":"disabled"`) {
		t.Fatalf("/readyz does not say so: %s", body)
	}
	if code := g.authGet(t, "/api/v1alpha1/environments", ""); code != http.StatusOK {
		t.Fatalf("with authentication disabled, a call without a token: %d", code)
	}
}
