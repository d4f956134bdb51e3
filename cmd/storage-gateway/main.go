// Command storage-gateway serves DCM's storage service-provider contract for
// many Kubernetes clusters from one process, and is its command line. This
// package only puts serve (internal/gateway) into the command tree
// (internal/cli) and runs it; behaviour lives in internal/.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := cli.Execute(ctx, newRootCommand())
	stop()
	os.Exit(code)
}

// newRootCommand is the whole command tree.
func newRootCommand() *cobra.Command { return cli.NewRoot(newServeCommand()) }
