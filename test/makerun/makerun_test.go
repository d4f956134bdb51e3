// Package makerun_test runs `make run` the way a person does on the first
// day, on its own database, state directory, ports and temporary directory:
// its state files are the owner's and its gateway kubeconfigs work; the
// README's walkthrough blocks run verbatim against it (with DCM's manager
// too); closing the terminal (SIGHUP) and Ctrl-C (SIGINT) leave no process,
// directory or listener behind and no make error; a second run says what it
// restored; and `make run-reset` starts afresh.
package makerun_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/repo"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dcm-project/storage-gateway/test/docs"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/ports"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// readyLine is the first line of the note make run prints once the
// clusters are registered.
const readyLine = "make run: the gateway is ready"

// exportLine is the note's line a person pastes.
var exportLine = regexp.MustCompile(`(?m)^  export (SG_GATEWAY_TOKEN=\S+ SG_GATEWAY_URL=\S+(?: DCM_URL=\S+)?)$`)

func TestMakeRunFirstDay(t *testing.T) {
	root := repo.Root()
	dir := t.TempDir()
	tmp := filepath.Join(dir, "tmp")
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewDatabase(t)
	dcmDB := pgtest.NewDatabase(t) // a name of its own, for DCM's manager
	// A person's shell: the test's environment without any SG_* setting,
	// then what keeps this run apart from others on the machine.
	// (`make test` runs this inside make: its variables would make this
	// make a sub-make.)
	var base []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "SG_") && !slices.Contains([]string{"TMPDIR", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"}, name) {
			base = append(base, kv)
		}
	}
	base = append(base, "TMPDIR="+tmp, "SG_STATE_DIR="+state, "SG_DATABASE_URL="+db.URL,
		"SG_LISTEN_ADDR=127.0.0.1:"+strconv.Itoa(ports.Free(t)))

	// The first run: the README's walkthrough, then the terminal closes.
	first := startMakeRun(t, root, append(base, "SG_EMBEDDED_NATS_LISTEN=off"))
	first.waitFor(t, readyLine, 10*time.Minute)
	exports := first.exports(t)
	checkStateFiles(t, state, exports)
	// Each block runs with bash -euo pipefail: a failing command fails the
	// test. What the first two print is checked too.
	expect := [][]string{
		{`"status":"ready"`, "\n401\n", "local-east", "local-west", "READY", "Labels:", "shared-files",
			"storageclass/csi-hostpath\nstorageclass/snapshots\n"},
		{"volume/db-1 deleted", `"status":"healthy"`, `"message":"READY: `, "createVolume"},
	}
	for i, block := range docs.Blocks(t, "README.md", "walkthrough") {
		out := runBlock(t, root, append(base, exports...), block, first)
		t.Logf("walkthrough block %d:\n%s", i+1, out)
		if i < len(expect) {
			for _, want := range expect[i] {
				if !strings.Contains(out, want) {
					t.Fatalf("walkthrough block %d printed no %q:\n%s", i+1, want, out)
				}
			}
		}
	}
	// The operator's manual shows what make run's clusters show.
	for _, sample := range docs.Samples(t, "deploy/README.md", "make-run") {
		out := runBlock(t, root, append(base, exports...), sample.Command, first)
		if !sample.Matches(out) {
			t.Errorf("deploy/README.md shows for %s:\n%s\nmake run prints:\n%s", sample.Command, strings.Join(sample.Output, "\n"), out)
		}
	}
	checkSecondRunRefused(t, root, base, state)
	first.signal(t, syscall.SIGHUP)
	first.wait(t)
	first.checkCleanExit(t, tmp, exports, syscall.SIGHUP)

	// The second run, with DCM: it names what it restored; DCM's walkthrough
	// runs; Ctrl-C ends it without a make error.
	second := startMakeRun(t, root, append(base, "DCM_ADDR=127.0.0.1:"+strconv.Itoa(ports.Free(t)),
		"DCM_DATABASE="+dcmDB.Name, "SG_EMBEDDED_NATS_LISTEN=127.0.0.1:"+strconv.Itoa(ports.Free(t))), "DCM=1")
	second.waitFor(t, readyLine, 5*time.Minute)
	// DCM's manager is up before the gateway starts, so the gateway's
	// first registrations reach it.
	out := second.out.String()
	dcmAt, gatewayAt := strings.Index(out, "spm: DCM service-provider-manager on http://"), strings.Index(out, `"msg":"starting"`)
	if dcmAt < 0 || gatewayAt < dcmAt || !strings.Contains(out, "before starting the gateway") {
		t.Fatalf("DCM's manager did not start before the gateway:\n%s", out)
	}
	if out := second.out.String(); !strings.Contains(out, "restored from an earlier run (kept in the database): local-east (now this run's cluster)") ||
		!strings.Contains(out, "make run-reset") {
		t.Fatalf("second run does not say what it restored:\n%s", out)
	}
	for _, block := range docs.Blocks(t, "README.md", "walkthrough-dcm") {
		out := runBlock(t, root, append(base, second.exports(t)...), block, second)
		t.Logf("DCM walkthrough:\n%s", out)
		for _, provider := range []string{"storage-gateway-local-east", "storage-gateway-local-west"} {
			if !regexp.MustCompile(`"display_name":"` + provider + `"[^}]*"health_status":"ready"`).MatchString(out) {
				t.Fatalf("DCM does not list %s as a ready provider:\n%s", provider, out)
			}
		}
	}
	// make run-reset refuses while make run runs.
	reset := func() (string, error) {
		cmd := exec.Command("make", "run-reset")
		cmd.Dir, cmd.Env = root, append(base, "DCM_DATABASE="+dcmDB.Name)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := reset(); err == nil || !strings.Contains(out, "make run is running with "+state) {
		t.Fatalf("make run-reset while make run runs: %v\n%s", err, out)
	}
	second.signal(t, syscall.SIGINT)
	second.wait(t)
	second.checkCleanExit(t, tmp, second.exports(t), syscall.SIGINT)

	// A third run, with the stand-in for DCM's control plane: the
	// environments are its agents, and a volume asked of it is made,
	// reported running with its bound volume, and deleted.
	third := startMakeRun(t, root, append(base, "DCM_ADDR=127.0.0.1:"+strconv.Itoa(ports.Free(t)),
		"SG_EMBEDDED_NATS_LISTEN=127.0.0.1:"+strconv.Itoa(ports.Free(t))), "DCM=agents")
	third.waitFor(t, readyLine, 5*time.Minute)
	for _, block := range docs.Blocks(t, "README.md", "walkthrough-dcm-agents") {
		out := runBlock(t, root, append(base, third.exports(t)...), block, third)
		t.Logf("DCM agents walkthrough:\n%s", out)
		for _, want := range []string{`"name":"storage-gateway-local-east"`, `"name":"storage-gateway-local-west"`,
			`"agent_name":"storage-gateway-local-east","status":"running"`, `"volume_name":"pvc-`, "Environment:    local-east"} {
			if !strings.Contains(out, want) {
				t.Fatalf("the agents walkthrough printed no %q:\n%s", want, out)
			}
		}
	}
	third.signal(t, syscall.SIGINT)
	third.wait(t)
	third.checkCleanExit(t, tmp, third.exports(t), syscall.SIGINT)

	// make run-reset: the databases and the state are gone.
	if out, err := reset(); err != nil {
		t.Fatalf("make run-reset: %v\n%s", err, out)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state directory after make run-reset: %v", err)
	}
	for _, url := range []string{db.URL, dcmDB.URL} {
		conn, err := pgx.Connect(context.Background(), url)
		var pgErr *pgconn.PgError
		if err == nil {
			_ = conn.Close(context.Background())
		}
		if !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
			t.Fatalf("database %s after make run-reset: %v", url, err)
		}
	}
}

// checkSecondRunRefused: while a run is up, another on the same state
// directory is refused before it writes anything — the first run's key
// ring, tokens and kubeconfigs stay as they were — and so is one on its own
// state directory but the same gateway address; each refusal says how to
// run another instance.
func checkSecondRunRefused(t *testing.T, root string, base []string, state string) {
	t.Helper()
	before := stateFiles(t, state)
	for _, tc := range []struct {
		name, want string
		env        []string
	}{
		{"the same state directory", "another make run uses " + state, nil},
		{"the same address", "is in use", []string{"SG_STATE_DIR=" + t.TempDir()}},
	} {
		second := startMakeRun(t, root, append(slices.Clone(base), tc.env...))
		second.wait(t)
		out := second.out.String()
		if second.err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, "make run INSTANCE=2") ||
			strings.Contains(out, readyLine) || strings.Contains(out, "keys init") {
			t.Fatalf("a second make run on %s was not refused first thing (%v):\n%s", tc.name, second.err, out)
		}
	}
	if after := stateFiles(t, state); !maps.Equal(before, after) {
		t.Fatal("a refused make run changed the first run's state files")
	}
}

// stateFiles reads every file of make run's state directory but the
// embedded NATS store.
func stateFiles(t *testing.T, state string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(state, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.IsDir() && d.Name() == "nats" {
				return filepath.SkipDir
			}
			return err
		}
		data, err := os.ReadFile(path)
		files[path] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// makeRun is one `make run` in a process group of its own, as a terminal
// runs a foreground job.
type makeRun struct {
	cmd *exec.Cmd
	out *syncbuf.Buffer
	// exited is closed once make has exited, with err its Wait error.
	exited chan struct{}
	err    error
}

func startMakeRun(t *testing.T, root string, env []string, args ...string) *makeRun {
	t.Helper()
	r := &makeRun{out: &syncbuf.Buffer{}, exited: make(chan struct{})}
	r.cmd = exec.Command("make", append([]string{"run"}, args...)...)
	r.cmd.Dir, r.cmd.Env = root, env
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
			<-r.exited
		}
	})
	return r
}

func (r *makeRun) waitFor(t *testing.T, text string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(r.out.String(), text) {
		select {
		case <-r.exited:
			t.Fatalf("make run ended (%v) before printing %q:\n%s", r.err, text, r.out)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run did not print %q within %s:\n%s", text, timeout, r.out)
		}
	}
}

// exports are the variables of the note's export line.
func (r *makeRun) exports(t *testing.T) []string {
	t.Helper()
	m := exportLine.FindStringSubmatch(r.out.String())
	if m == nil {
		t.Fatalf("no export line in make run's note:\n%s", r.out)
	}
	return strings.Fields(m[1])
}

// signal sends sig to the whole foreground job, as the terminal does.
func (r *makeRun) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(-r.cmd.Process.Pid, sig); err != nil {
		t.Fatal(err)
	}
}

func (r *makeRun) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("make run still running 2 minutes after the signal:\n%s", r.out)
	}
}

// makeError is how make reports a failed recipe or its own interruption.
var makeError = regexp.MustCompile(`make(\[\d+\])?: \*\*\*`)

// checkCleanExit: make reported no error, local-clusters stopped the clusters, and
// nothing the run started is left — no process carrying its TMPDIR, no
// harness directory in it, nothing listening at the gateway's address.
func (r *makeRun) checkCleanExit(t *testing.T, tmp string, exports []string, sig syscall.Signal) {
	t.Helper()
	out := r.out.String()
	if makeError.MatchString(out) || !strings.Contains(out, "local-clusters: clusters stopped") {
		t.Fatalf("make run did not end cleanly:\n%s", out)
	}
	// make itself ends by the terminal's signal (it re-raises it once its
	// recipe is done) or exits 0; any exit code is a failure it reported.
	status, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
	byTheSignal := ok && status.Signaled() && status.Signal() == sig
	if !byTheSignal && (!ok || !status.Exited() || status.ExitStatus() != 0) {
		t.Fatalf("make run ended with %v after %v:\n%s", r.err, sig, out)
	}
	gateway, err := url.Parse(exportValue(t, exports, "SG_GATEWAY_URL"))
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(t.Context(), "tcp", gateway.Host); err == nil {
		_ = conn.Close()
		t.Fatalf("%s still accepts connections", gateway.Host)
	}
	harness.WaitForNoProcessesWithEnv(t, "TMPDIR="+tmp, 15*time.Second)
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "sg-harness-*")); len(dirs) > 0 {
		t.Fatalf("directories left behind: %v", dirs)
	}
}

// exportValue is the value of name in the note's export line.
func exportValue(t *testing.T, exports []string, name string) string {
	t.Helper()
	for _, kv := range exports {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s in %v", name, exports)
	return ""
}

// checkStateFiles: the development key ring, the token file and the
// cluster kubeconfigs are the owner's alone; the token file holds no token;
// each gateway kubeconfig reaches its cluster.
func checkStateFiles(t *testing.T, state string, exports []string) {
	t.Helper()
	files := []string{"keyring.json", "tokens.json"}
	specs, err := harness.LocalSpecs()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		files = append(files, filepath.Join("clusters", s.Environment.ID+".kubeconfig"), filepath.Join("clusters", s.Environment.ID+".admin.kubeconfig"))
	}
	for _, f := range files {
		if fi, err := os.Stat(filepath.Join(state, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v; want mode 0600", f, fi, err)
		}
	}
	if raw, err := os.ReadFile(filepath.Join(state, "tokens.json")); err != nil || strings.Contains(string(raw), exportValue(t, exports, "SG_GATEWAY_TOKEN")) {
		t.Fatalf("the token file holds the token (or is unreadable: %v)", err)
	}
	for _, s := range specs {
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(state, "clusters", s.Environment.ID+".kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if classes, err := cs.StorageV1().StorageClasses().List(t.Context(), metav1.ListOptions{}); err != nil || len(classes.Items) == 0 {
			t.Fatalf("%s: the gateway kubeconfig lists %v storage classes: %v", s.Environment.ID, classes, err)
		}
	}
}

// runBlock runs a README block with bash in the repository, failing on the
// first command that fails (with the output of the make run it ran
// against), and returns its output.
func runBlock(t *testing.T, root string, env []string, block string, against *makeRun) string {
	t.Helper()
	out, err := docs.Run(t.Context(), root, env, block)
	if err != nil {
		t.Fatalf("README block failed: %v\n--- make run:\n%s", err, against.out)
	}
	return out
}
