package harness

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The emulated drivers' controllers (provisioner.go, resizer.go) run in a
// process of their own per cluster, as a CSI driver's controller does, and
// not in the harness's: the provisioner library adds its types to
// client-go's global scheme each time a controller is made, while every
// client in the process reads that scheme, so a cluster started beside
// running ones (StartAll, or a test's own cluster) could crash the process
// with a concurrent map write. The process is this executable again, told
// by emulatedDriversEnv which drivers to serve.
const emulatedDriversEnv = "SG_HARNESS_EMULATED_DRIVERS"

func init() {
	// Under a launcher (lifetime.go) the launcher runs first and executes
	// this binary again without launchEnv; the drivers start then.
	drivers := os.Getenv(emulatedDriversEnv)
	if drivers == "" || os.Getenv(launchEnv) != "" {
		return
	}
	if err := serveEmulatedDrivers(drivers, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "harness emulated drivers:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// startEmulatedDrivers runs the cluster's emulated drivers' provisioner and
// resizer until ctx ends (nothing when all its drivers are plugins).
func (c *Cluster) startEmulatedDrivers(ctx context.Context, kubeconfig string) error {
	drivers := slices.DeleteFunc(slices.Clone(c.Spec.Cluster.Drivers), func(d Driver) bool { return d.Plugin })
	if len(drivers) == 0 {
		return nil
	}
	spec, err := json.Marshal(drivers)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	return c.runProcess(ctx, "emulated-drivers", []string{emulatedDriversEnv + "=" + string(spec)}, self, "--kubeconfig="+kubeconfig)
}

// serveEmulatedDrivers is the emulated drivers' process: it serves the
// drivers (JSON) on the cluster its --kubeconfig names until SIGTERM.
func serveEmulatedDrivers(spec string, args []string) error {
	flags := flag.NewFlagSet("emulated-drivers", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", "", "the cluster's admin kubeconfig")
	if err := flags.Parse(args); err != nil {
		return err
	}
	quietKubernetesLogs()
	var drivers []Driver
	if err := json.Unmarshal([]byte(spec), &drivers); err != nil {
		return fmt.Errorf("%s: %w", emulatedDriversEnv, err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	// As fast as the harness's own admin client (envtest's): a test API
	// server needs no protecting, and tests wait on every claim.
	config.QPS, config.Burst = 1000, 2000
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { runProvisioners(ctx, client, drivers) })
	wg.Go(func() { runResizer(ctx, client, drivers) })
	wg.Wait()
	return nil
}
