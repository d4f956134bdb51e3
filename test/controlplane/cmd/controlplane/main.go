// Command controlplane runs the stand-in for DCM's control plane (package
// test/controlplane) on its own: `make run DCM=agents` starts it before the
// gateway, on the NATS both use, so the gateway's environments register as
// its agents and the walkthrough asks it for a volume.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dcm-project/storage-gateway/test/controlplane"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address of the agent API (and the stand-in's instance API)")
	natsURL := flag.String("nats", "nats://127.0.0.1:4223", "NATS server with JetStream, shared with the gateway")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cp, err := controlplane.Run(ctx, controlplane.Options{NATSURL: *natsURL, Listen: *listen})
	if err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "controlplane: DCM control-plane stand-in on %s (agents, service-type-instances)\n", cp.URL)
	<-ctx.Done()
	if err := cp.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}
