package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/cli"
	"github.com/dcm-project/storage-gateway/internal/gateway"
)

func newServeCommand() *cobra.Command {
	return &cobra.Command{
		Use: "serve",
		Example: "  SG_DATABASE_URL=postgres://postgres@127.0.0.1:5432/storage_gateway SG_KEY_RING_FILE=keys.json \\\n" +
			"    SG_AUTH_TOKEN_FILE=tokens.json storage-gateway serve",
		Short: "Run the gateway's HTTP API until SIGTERM or SIGINT",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, logger, err := cli.LoadConfig()
			if err != nil {
				return err
			}
			// Before anything else: a SIGHUP sent while the gateway starts
			// (say, to every replica during a key rotation) must not kill it.
			hangups := make(chan os.Signal, 1)
			signal.Notify(hangups, syscall.SIGHUP)
			defer signal.Stop(hangups)
			g, err := gateway.New(cmd.Context(), cfg, gateway.Options{Logger: logger, Reload: hangups})
			if err != nil {
				return err
			}
			return g.Run(cmd.Context())
		},
	}
}
