// Command storage-gateway serves DCM's storage service-provider contract for
// many Kubernetes clusters from one process. This package only wires the
// internal packages together; behaviour lives in internal/.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/logging"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	root := newRootCommand()
	stderr := &terminalWriter{w: os.Stderr}
	root.SetOut(&terminalWriter{w: os.Stdout})
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "storage-gateway:", err)
		stop()
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "storage-gateway",
		Short: "Serve persistent volumes on many Kubernetes clusters for DCM",
		Long: "storage-gateway keeps a registry of Kubernetes environments and serves DCM's\n" +
			"storage service-provider contract for each of them. Settings come from SG_*\n" +
			"environment variables (see the README).",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newMigrateCommand(), newEnvCommand(), newClassesCommand(), newKeysCommand(), newTokensCommand(),
		newLoginCommand(), newLogoutCommand(), newAuditCommand(), newVersionCommand())
	return root
}

// loadConfig reads SG_* settings and builds the JSON logger every command
// uses; the Kubernetes client libraries log through it too.
func loadConfig() (config.Config, *slog.Logger, error) {
	cfg, err := config.Load()
	if err != nil {
		return config.Config{}, nil, err
	}
	level, _ := cfg.SlogLevel() // validated by Load
	logger := logging.New(os.Stderr, level)
	logging.RouteKlog(logger)
	return cfg, logger, nil
}
