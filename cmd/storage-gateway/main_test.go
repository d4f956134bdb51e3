package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/ports"
)

// binary is the gateway built once for these tests, run as a real process.
var binary string

func TestMain(m *testing.M) {
	var err error
	if binary, err = gatewayproc.Build(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	gatewayproc.Cleanup()
	os.Exit(code)
}

// gateway is one running `storage-gateway serve` process.
type gateway struct{ *gatewayproc.Process }

// startGateway runs serve with env (plus a private state dir, a random port
// and a fresh key ring) and waits until it logs its listen address.
func startGateway(t *testing.T, env map[string]string) *gateway {
	t.Helper()
	vars := gatewayproc.Env(t, binary, "SG_EMBEDDED_NATS_LISTEN=off", "SG_LOG_LEVEL=debug")
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	return &gateway{gatewayproc.Start(t, binary, vars)}
}

// newKeyRing creates a key ring file with `keys init` and returns its path.
func newKeyRing(t *testing.T) string { return gatewayproc.NewKeyRing(t, binary) }

func (g *gateway) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return g.request(t, http.MethodGet, path, "", nil)
}

// request calls the gateway's API with token (none if empty) and a JSON
// body (none if nil), and returns the status and the answer.
func (g *gateway) request(t *testing.T, method, path, token string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+g.Addr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

// waitReady polls /readyz until it answers want, returning the last body.
func (g *gateway) waitReady(t *testing.T, want int, within time.Duration) string {
	t.Helper()
	var code int
	var body string
	poll.Until(t, within, fmt.Sprintf("/readyz answering %d", want), func() bool {
		code, body = g.get(t, "/readyz")
		return code == want
	})
	return body
}

func failedChecks(t *testing.T, body string) []string {
	t.Helper()
	var r struct {
		Checks []struct {
			Name string
			OK   bool `json:"ok"`
		}
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, c := range r.Checks {
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	return failed
}

func TestServeWithEmbeddedNATSIsReadyAndStopsGracefully(t *testing.T) {
	db := pgtest.NewDatabase(t)
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": db.URL})

	if code, body := g.get(t, "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	g.waitReady(t, 200, 10*time.Second)
	if code, body := g.get(t, "/metrics"); code != 200 || !strings.Contains(body, "storage_gateway_http_requests_total") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics = %d, missing gateway or runtime metrics", code)
	}
	if code, body := g.get(t, "/api/v1alpha1/openapi.yaml"); code != 200 || !strings.HasPrefix(body, "openapi: ") {
		t.Fatalf("openapi.yaml = %d", code)
	}

	if err := g.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.Done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, g.Logs())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not stop within 20s of SIGTERM")
	}
	if !strings.Contains(g.Logs(), `"msg":"stopped"`) {
		t.Fatalf("no clean stop logged:\n%s", g.Logs())
	}
	if _, err := net.DialTimeout("tcp", g.Addr, time.Second); err == nil {
		t.Fatal("port still open after shutdown")
	}
}

func TestServeIsNotReadyUntilMigrated(t *testing.T) {
	db := pgtest.NewDatabase(t)
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": db.URL, "SG_MIGRATE_ON_START": "false"})

	body := g.waitReady(t, 503, 10*time.Second)
	// The membership cannot join the other replicas before its tables
	// exist, nor can the registry watch read the registry or the fleet
	// index load.
	if failed := failedChecks(t, body); strings.Join(failed, ",") != "migrations,membership,background work" {
		t.Fatalf("failed checks %v, want migrations, membership and background work: %s", failed, body)
	}
	// An authenticated caller is told which.
	_, detailed := g.request(t, http.MethodGet, "/readyz", g.Token(), nil)
	for _, worker := range []string{"registry watch", "fleet feed"} {
		if !strings.Contains(detailed, worker) {
			t.Errorf("readiness does not name %s as not started: %s", worker, detailed)
		}
	}
	migrate := exec.Command(binary, "migrate")
	migrate.Env = []string{"HOME=" + t.TempDir(), "SG_DATABASE_URL=" + db.URL}
	out, err := migrate.CombinedOutput()
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "schema version") {
		t.Fatalf("migrate output %q", out)
	}
	// Without a restart, the running gateway notices the schema is current
	// and joins at its next heartbeat.
	g.waitReady(t, 200, 15*time.Second)
}

func TestServeReadinessFollowsPostgres(t *testing.T) {
	db := pgtest.NewDatabase(t)
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": db.URL})
	g.waitReady(t, 200, 10*time.Second)

	db.Drop(t)
	body := g.waitReady(t, 503, 10*time.Second)
	if failed := failedChecks(t, body); len(failed) == 0 || failed[0] != "postgres" {
		t.Fatalf("failed checks %v after the database vanished", failed)
	}
	if code, _ := g.get(t, "/healthz"); code != 200 {
		t.Fatalf("liveness must not follow dependencies, got %d", code)
	}
}

// TestServeReadinessFollowsExternalNATS runs an external NATS server that the
// test can stop and restart on the same port.
func TestServeReadinessFollowsExternalNATS(t *testing.T) {
	port := ports.Free(t)
	storeDir := t.TempDir()
	startNATS := func() *natsserver.Server {
		s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: storeDir, NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("test NATS did not start")
		}
		return s
	}
	ns := startNATS()
	defer func() { ns.Shutdown() }()

	g := startGateway(t, map[string]string{"SG_DATABASE_URL": pgtest.NewDatabase(t).URL, "SG_NATS_URL": fmt.Sprintf("nats://127.0.0.1:%d", port)})
	g.waitReady(t, 200, 10*time.Second)

	ns.Shutdown()
	ns.WaitForShutdown()
	body := g.waitReady(t, 503, 10*time.Second)
	if failed := failedChecks(t, body); strings.Join(failed, ",") != "nats" {
		t.Fatalf("failed checks %v, want only nats", failed)
	}
	ns = startNATS()
	g.waitReady(t, 200, 15*time.Second)
}

func TestServeWithUnreachableExternalNATSStillStarts(t *testing.T) {
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": pgtest.NewDatabase(t).URL, "SG_NATS_URL": fmt.Sprintf("nats://127.0.0.1:%d", ports.Free(t))})
	// Every other check passes (the membership's once its first heartbeat
	// is in), and nats keeps failing.
	failed := poll.Value(t, 10*time.Second, func() ([]string, bool) {
		code, body := g.get(t, "/readyz")
		failed := failedChecks(t, body)
		return failed, code == 503 && strings.Join(failed, ",") == "nats"
	})
	t.Logf("not ready while NATS is unreachable: failed checks %v", failed)
}

func TestBadConfigurationExitsWithClearMessage(t *testing.T) {
	const secret = "pa55w0rd-xyz"
	cmd := exec.Command(binary, "serve")
	cmd.Env = []string{"HOME=" + t.TempDir(), "SG_LISTEN_ADDR=nowhere", "SG_NATS_URL=http://u:" + secret + "@x:1"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1\n%s", err, out)
	}
	for _, want := range []string{"SG_LISTEN_ADDR", "SG_NATS_URL"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("message does not name %s: %s", want, out)
		}
	}
	if strings.Contains(string(out), secret) {
		t.Fatalf("message echoes a secret: %s", out)
	}
}

func TestUnreachableDatabaseFailsStartWithoutLeakingPassword(t *testing.T) {
	const secret = "pa55w0rd-xyz"
	cmd := exec.Command(binary, "serve")
	cmd.Env = []string{"HOME=" + t.TempDir(), "SG_KEY_RING_FILE=" + newKeyRing(t),
		"SG_DATABASE_URL=postgres://sg:" + secret + "@127.0.0.1:1/sg?connect_timeout=2"}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("started without a database")
	}
	if !strings.Contains(string(out), "127.0.0.1:1/sg") || strings.Contains(string(out), secret) {
		t.Fatalf("want the server named and the password absent: %s", out)
	}
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(binary, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Version   string `json:"version"`
		GoVersion string `json:"go_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version == "" || !strings.HasPrefix(v.GoVersion, "go1.") {
		t.Fatalf("version output %q (%v)", out, err)
	}
	// --version says what version says: the version, the commit when the
	// build recorded one, and the Go release.
	plain, err := exec.Command(binary, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	flag, err := exec.Command(binary, "--version").Output()
	if err != nil || string(flag) != string(plain) || !regexp.MustCompile(`^storage-gateway \S+ \((commit \S+, )?go1\.\S+\)\n$`).Match(plain) {
		t.Fatalf("--version %q (%v), version %q", flag, err, plain)
	}
}

// TestMissingDatabaseHintsHowToCreateIt: a fresh server without the
// gateway's database is a first-day stumble; the message says what to run,
// and that command then works.
func TestMissingDatabaseHintsHowToCreateIt(t *testing.T) {
	db := pgtest.NewDatabase(t)
	db.Drop(t)
	env := []string{"SG_DATABASE_URL=" + db.URL, "SG_KEY_RING_FILE=" + newKeyRing(t)}
	for _, args := range [][]string{{"serve"}, {"migrate"}} {
		out, err := run(t, env, args...)
		if err == nil || !strings.Contains(out, "create it with `storage-gateway migrate --create-database`") {
			t.Fatalf("%v on a missing database: %v\n%s", args, err, out)
		}
	}
	if out := mustRun(t, env, "migrate", "--create-database"); !strings.Contains(out, "schema version") {
		t.Fatalf("migrate --create-database: %s", out)
	}
}

// TestUnreachableGatewaySaysHowToPointTheCLIAtIt: no answer is said once,
// with what went wrong and the flag and variable that choose the gateway.
func TestUnreachableGatewaySaysHowToPointTheCLIAtIt(t *testing.T) {
	env := []string{"SG_GATEWAY_TOKEN=t"}
	// Something that takes the request and hangs up without an answer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Read(make([]byte, 4096))
			_ = conn.Close()
		}
	}()
	for _, c := range []struct {
		gateway, want string
	}{
		{ln.Addr().String(), "no answer from the gateway at http://" + ln.Addr().String() + " (EOF); the request may have been carried out"},
		{"127.0.0.1:1", `cannot reach the gateway at http://127.0.0.1:1: nothing is listening there`},
		{"http://no-such-host.invalid:8080", `cannot reach the gateway at http://no-such-host.invalid:8080: no host named "no-such-host.invalid" was found`},
		{"ftp://gateway", `--gateway "ftp://gateway" is not a gateway address`},
	} {
		out, err := run(t, env, "volume", "list", "-A", "--gateway", c.gateway)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("--gateway %s: want %q, got %v:\n%s", c.gateway, c.want, err, out)
		}
		if strings.HasPrefix(c.want, "cannot reach") && (!strings.Contains(out, "--gateway URL or SG_GATEWAY_URL") ||
			strings.Count(out, "no-such-host") > 2 || strings.Contains(out, "lookup") || strings.Count(out, "\n") != 1) {
			t.Errorf("--gateway %s: want one line naming --gateway and SG_GATEWAY_URL once:\n%s", c.gateway, out)
		}
	}
}

// TestMistypedSubcommandFails: `env lst` is an error with suggestions, not
// help and exit 0; a group alone still prints its help.
func TestMistypedSubcommandFails(t *testing.T) {
	for _, args := range [][]string{{"env", "lst"}, {"volume", "creat"}, {"keys", "lsit"}, {"tokens", "revok"}, {"completion", "bsh"}} {
		out, err := run(t, nil, args...)
		if err == nil || !strings.Contains(out, `unknown command "`+args[1]+`"`) || !strings.Contains(out, "Did you mean this?") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	if out := mustRun(t, nil, "env"); !strings.Contains(out, "Available Commands:") {
		t.Errorf("env alone:\n%s", out)
	}
}

// TestShellCompletion: the completion scripts are generated for each shell.
func TestShellCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "complete -o default -F __start_storage-gateway storage-gateway",
		"zsh":  "#compdef storage-gateway",
		"fish": "complete -c storage-gateway",
	} {
		if out := mustRun(t, nil, "completion", shell); !strings.Contains(out, want) {
			t.Errorf("completion %s lacks %q", shell, want)
		}
	}
	// The scripts complete subcommands through the binary itself.
	if out := mustRun(t, nil, "__complete", "volume", ""); !strings.Contains(out, "create") || !strings.Contains(out, "expand") {
		t.Errorf("__complete volume:\n%s", out)
	}
}

// listItems reads what a list command prints with -o json: a List, as
// kubectl prints one.
func listItems[T any](t *testing.T, out string) []T {
	t.Helper()
	var l struct {
		Kind  string `json:"kind"`
		Items []T    `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || l.Kind != "List" || l.Items == nil {
		t.Fatalf("want a List with items: %v\n%s", err, out)
	}
	return l.Items
}
