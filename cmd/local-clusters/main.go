// Command local-clusters starts harness clusters (environments/local-*.yaml by default),
// writes a gateway kubeconfig, an admin kubeconfig and an environment manifest
// for each into -out, and then either waits for SIGINT/SIGTERM or runs the
// command after "--" (the gateway, in `make run`) until it exits. With
// -register it registers every cluster with that gateway once it is ready,
// through the admin CLI, and says which environments the gateway had from
// before. SIGINT, SIGTERM and SIGHUP (a closed terminal) stop the command
// and tear the clusters down; so does the death of its parent.
//
//	go run ./cmd/local-clusters -out /tmp/clusters \
//	    -gateway http://127.0.0.1:8080 -register "storage-gateway env apply" -- storage-gateway serve
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/dcm"
	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/test/harness"
)

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "local-clusters:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run() (int, error) {
	out := flag.String("out", filepath.Join(os.TempDir(), "storage-gateway-clusters"), "directory for the kubeconfig files")
	gateway := flag.String("gateway", "http://127.0.0.1:8080", "base URL of the gateway the command serves (for -register)")
	register := flag.String("register", "", `command that registers one cluster, called as CMD ID -f MANIFEST --kubeconfig FILE once the gateway is ready (e.g. "storage-gateway env apply")`)
	also := flag.String("also", "", "a command to run beside the main one for as long as it runs (e.g. DCM's service-provider-manager)")
	alsoReady := flag.String("also-ready", "", "with -also: start the -also command first and the main one once this URL answers 200 "+
		"(DCM's manager before the gateway that registers with it); otherwise it starts once the gateway is ready")
	natsListen := flag.String("nats", "", "run a NATS server with JetStream on this address (its store under -out) for the commands, "+
		"so a companion that needs NATS can start before the gateway")
	resetHint := flag.String("reset-hint", "", "how to start afresh, printed when the gateway had environments from before")
	noteEnv := flag.String("note-env", "", "an environment variable whose text is printed once the gateway is ready and the clusters are registered "+
		"(how to call it; an environment variable, not an argument, since it may hold a token and arguments are visible to every local user)")
	preflightOnly := flag.Bool("preflight", false, "only check, before make run touches anything, that no other run holds the "+
		"state directory's lock (taken here on -lock-fd, for the caller) and that -addresses are free; then exit")
	lockFD := flag.Int("lock-fd", -1, "with -preflight: the caller's open descriptor of STATE/"+LockFile)
	state := flag.String("state", "", "with -preflight: make run's state directory")
	addresses := flag.String("addresses", "", "with -preflight: comma-separated addresses the run will listen on")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: local-clusters [-out DIR] [SPEC.yaml ...] [-- COMMAND ARGS...]\n")
		flag.PrintDefaults()
	}
	args, command := splitCommand(os.Args[1:])
	if err := flag.CommandLine.Parse(args); err != nil {
		return 2, err
	}
	if *preflightOnly {
		if err := preflight(*lockFD, *state, strings.Split(*addresses, ",")); err != nil {
			return 1, err
		}
		return 0, nil
	}
	specFiles := flag.Args()

	specs, err := loadSpecs(specFiles)
	if err != nil {
		return 2, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// After the first signal, a second one ends it at once: what it
	// started dies with it (parent-death signals), and the next start
	// sweeps the clusters' directories.
	context.AfterFunc(ctx, stop)
	// `make run` runs local-clusters directly: should make be killed outright, it
	// gets SIGTERM and stops everything it started.
	if err := harness.SignalOnParentDeath(syscall.SIGTERM); err != nil {
		return 1, fmt.Errorf("set the parent-death signal: %w", err)
	}

	start := time.Now()
	fmt.Fprintf(os.Stderr, "local-clusters: starting %d cluster(s) (the first run builds Kubernetes, ~10 min)\n", len(specs))
	clusters, err := harness.StartAll(ctx, specs)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil // interrupted while starting; StartAll stopped what it had started
		}
		return 1, err
	}
	defer func() {
		harness.StopAll(clusters)
		fmt.Fprintln(os.Stderr, "local-clusters: clusters stopped")
	}()
	if err := writeKubeconfigs(*out, clusters); err != nil {
		return 1, err
	}
	printSummary(clusters, *out, time.Since(start))

	if len(command) == 0 {
		<-ctx.Done()
		return 0, nil
	}
	if *natsListen != "" {
		n, err := outbox.ConnectNATS(outbox.NATSOptions{EmbeddedListen: *natsListen, EmbeddedStoreDir: filepath.Join(*out, "nats")},
			slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			return 1, err
		}
		defer n.Close(context.WithoutCancel(ctx))
		fmt.Fprintf(os.Stderr, "local-clusters: NATS with JetStream on nats://%s\n", *natsListen)
	}
	if *also != "" {
		// The companion waits for the gateway's readiness, or (-also-ready)
		// the gateway for the companion's.
		ready := *gateway + "/readyz"
		if *alsoReady != "" {
			ready = ""
		}
		defer inBackground(ctx, func(ctx context.Context) { runCompanion(ctx, ready, strings.Fields(*also)) })()
		if *alsoReady != "" {
			fmt.Fprintln(os.Stderr, "local-clusters: waiting for", *alsoReady, "before starting the gateway")
			if err := waitReady(ctx, *alsoReady); err != nil {
				if ctx.Err() != nil {
					return 0, nil
				}
				return 1, fmt.Errorf("the -also command did not become ready at %s: %w", *alsoReady, err)
			}
		}
	}
	if *register != "" {
		defer inBackground(ctx, func(ctx context.Context) {
			registerAll(ctx, *gateway, strings.Fields(*register), clusters, *out, os.Getenv(*noteEnv), *resetHint)
		})()
	}
	return runChild(ctx, command, *out)
}

// inBackground runs fn in a goroutine; the function it returns cancels fn's
// context and waits for fn to return.
func inBackground(ctx context.Context, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	return func() { cancel(); <-done }
}

// childProcess is command as a child of local-clusters, with env (nil: this
// process's): when ctx ends it gets SIGTERM, and SIGKILL grace later; when
// local-clusters dies, it gets SIGTERM.
func childProcess(ctx context.Context, command, env []string, grace time.Duration) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, command[0], command[1:]...)
	cmd.Env = env
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = grace
	return cmd, harness.BindToParent(cmd, syscall.SIGTERM)
}

// runCompanion runs a command beside the main one, once ready answers
// (the gateway's readiness, when the companion needs its embedded NATS;
// at once when empty), its output on the terminal, until ctx ends; it dies
// with local-clusters.
func runCompanion(ctx context.Context, ready string, command []string) {
	if ready != "" {
		if err := waitReady(ctx, ready); err != nil {
			return
		}
	}
	cmd, err := childProcess(ctx, command, nil, 10*time.Second)
	if err == nil {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		err = cmd.Run()
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "local-clusters: companion exited:", err)
	}
}

// registerAll waits for the gateway's /readyz, says which environments it
// had from before, and registers every cluster by running the registration
// command, whose output goes to the terminal; then it prints note.
func registerAll(ctx context.Context, gateway string, command []string, clusters []*harness.Cluster, dir, note, resetHint string) {
	if err := waitReady(ctx, gateway+"/readyz"); err != nil {
		fmt.Fprintln(os.Stderr, "local-clusters: gateway not ready, clusters not registered:", err)
		return
	}
	client, err := gatewayClient(gateway)
	if err != nil {
		fmt.Fprintln(os.Stderr, "local-clusters: gateway client:", err)
		return
	}
	restored, err := existingEnvironments(ctx, client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "local-clusters: list the gateway's environments:", err)
	}
	for _, c := range clusters {
		args := append(slices.Clone(command[1:]), c.Name(),
			"-f", filepath.Join(dir, c.Name()+".environment.yaml"),
			"--kubeconfig", filepath.Join(dir, c.Name()+".kubeconfig"))
		cmd, err := childProcess(ctx, append([]string{command[0]}, args...), append(os.Environ(), "SG_GATEWAY_URL="+gateway), 10*time.Second)
		if err == nil {
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			err = cmd.Run()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "local-clusters: register %s: %v\n", c.Name(), err)
		}
	}
	if len(restored) > 0 {
		fmt.Fprintln(os.Stderr, describeRestored(restored, clusters, resetHint))
	}
	waitSettled(ctx, client, clusters)
	if note != "" {
		fmt.Fprintln(os.Stderr, note)
	}
}

// gatewayClient calls the gateway with the token in SG_GATEWAY_TOKEN.
func gatewayClient(gateway string) (*api.ClientWithResponses, error) {
	return api.NewClientWithResponses(gateway, api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		if token := os.Getenv("SG_GATEWAY_TOKEN"); token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return nil
	}))
}

// existingEnvironments lists the environments the gateway has (with the
// token in SG_GATEWAY_TOKEN), by id, with their state.
func existingEnvironments(ctx context.Context, client *api.ClientWithResponses) ([]api.Environment, error) {
	var all []api.Environment
	params := api.ListEnvironmentsParams{}
	for {
		resp, err := client.ListEnvironmentsWithResponse(ctx, &params)
		if err != nil {
			return nil, err
		}
		if resp.JSON200 == nil {
			return nil, fmt.Errorf("HTTP %d", resp.StatusCode())
		}
		all = append(all, resp.JSON200.Environments...)
		if resp.JSON200.NextPageToken == nil {
			return all, nil
		}
		params.PageToken = resp.JSON200.NextPageToken
	}
}

// waitSettled waits, for up to two minutes, until every cluster's
// environment is healthy as DCM sees it (the gateway's connection synced,
// which a credential rotation renews) and no DCM registration of theirs is
// pending: once the note is printed, volumes can be created, through the
// gateway or through DCM.
func waitSettled(ctx context.Context, client *api.ClientWithResponses, clusters []*harness.Cluster) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	said := false
	for {
		unsettled, err := unsettledClusters(ctx, client, clusters)
		if err != nil || len(unsettled) == 0 {
			return
		}
		if !said {
			fmt.Fprintf(os.Stderr, "local-clusters: waiting for %s to be served (and known to DCM, if registering)\n", strings.Join(unsettled, ", "))
			said = true
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "local-clusters: still not served: %s\n", strings.Join(unsettled, ", "))
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// unsettledClusters names the clusters whose environment is not healthy
// yet, or whose DCM registration is pending.
func unsettledClusters(ctx context.Context, client *api.ClientWithResponses, clusters []*harness.Cluster) ([]string, error) {
	var unsettled []string
	for _, c := range clusters {
		health, err := client.GetVolumesHealthWithResponse(ctx, c.Name())
		if err != nil {
			return nil, err
		}
		env, err := client.GetEnvironmentWithResponse(ctx, c.Name())
		if err != nil {
			return nil, err
		}
		healthy := health.JSON200 != nil && health.JSON200.Status == api.Healthy
		pending := env.JSON200 != nil && env.JSON200.Status.DcmRegistration != nil &&
			ptr.Deref(env.JSON200.Status.DcmRegistration.State, "") == dcm.StatePending
		if !healthy || pending {
			unsettled = append(unsettled, c.Name())
		}
	}
	return unsettled, nil
}

// describeRestored says which environments the gateway kept from an earlier
// run: those of this run's clusters got the new clusters' credentials; any
// other one still points at a cluster of that run, gone now.
func describeRestored(restored []api.Environment, clusters []*harness.Cluster, resetHint string) string {
	var parts []string
	for _, e := range restored {
		if slices.ContainsFunc(clusters, func(c *harness.Cluster) bool { return c.Name() == e.Id }) {
			parts = append(parts, e.Id+" (now this run's cluster)")
		} else {
			parts = append(parts, fmt.Sprintf("%s (%s: not a cluster of this run)", e.Id, e.Status.State))
		}
	}
	msg := "local-clusters: restored from an earlier run (kept in the database): " + strings.Join(parts, ", ")
	if resetHint != "" {
		msg += "\n  " + resetHint
	}
	return msg
}

func waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// splitCommand separates local-clusters' own arguments from the command after "--"
// (done before flag parsing, which would swallow the "--").
func splitCommand(args []string) (own, command []string) {
	if i := slices.Index(args, "--"); i >= 0 {
		return args[:i], args[i+1:]
	}
	return args, nil
}

func loadSpecs(files []string) ([]harness.Spec, error) {
	if len(files) == 0 {
		return harness.LocalSpecs()
	}
	specs := make([]harness.Spec, 0, len(files))
	for _, f := range files {
		s, err := harness.LoadSpec(f)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// writeKubeconfigs stores <id>.kubeconfig (the gateway's least-privilege
// token), <id>.admin.kubeconfig and <id>.environment.yaml (the registration
// manifest) per cluster, readable by the owner only. They are throwaway
// credentials of local test clusters.
func writeKubeconfigs(dir string, clusters []*harness.Cluster) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, c := range clusters {
		gw, err := c.GatewayKubeconfig()
		if err != nil {
			return err
		}
		admin := c.AdminKubeconfig()
		if err := os.WriteFile(filepath.Join(dir, c.Name()+".kubeconfig"), gw, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.Name()+".admin.kubeconfig"), admin, 0o600); err != nil {
			return err
		}
		manifest, err := yaml.Marshal(map[string]harness.Environment{"environment": c.Spec.Environment})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.Name()+".environment.yaml"), manifest, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func printSummary(clusters []*harness.Cluster, dir string, took time.Duration) {
	fmt.Fprintf(os.Stderr, "local-clusters: %d cluster(s) ready in %s\n", len(clusters), took.Round(100*time.Millisecond))
	w := tabwriter.NewWriter(os.Stderr, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  ENVIRONMENT\tAPI SERVER (gateway path)\tGATEWAY KUBECONFIG\tADMIN KUBECONFIG")
	for _, c := range clusters {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", c.Name(), c.ServerURL(),
			filepath.Join(dir, c.Name()+".kubeconfig"), filepath.Join(dir, c.Name()+".admin.kubeconfig"))
	}
	_ = w.Flush()
}

// runChild runs the command with SG_LOCAL_CLUSTERS_DIR pointing at the
// kubeconfigs until it exits or ctx ends (then it gets SIGTERM, and SIGKILL
// 30 s later), and returns its exit code.
func runChild(ctx context.Context, command []string, dir string) (int, error) {
	cmd, err := childProcess(ctx, command, append(os.Environ(), "SG_LOCAL_CLUSTERS_DIR="+dir), 30*time.Second)
	if err != nil {
		return 1, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return exitCode(cmd.Run())
}

func exitCode(err error) (int, error) {
	if errors.Is(err, context.Canceled) {
		return 0, nil // stopped on our signal and exited cleanly
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}
