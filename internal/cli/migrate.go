package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/postgres"
)

func newMigrateCommand() *cobra.Command {
	var createDatabase bool
	cmd := &cobra.Command{
		Use:     "migrate",
		Example: "  SG_DATABASE_URL=postgres://postgres@127.0.0.1:5432/storage_gateway storage-gateway migrate --create-database",
		Short:   "Apply pending database schema migrations and exit",
		Long: "migrate applies the schema migrations embedded in this binary to SG_DATABASE_URL.\n" +
			"It is safe to run concurrently with other replicas (an advisory lock serialises them).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, logger, err := LoadConfig()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if createDatabase {
				if err := postgres.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
					return err
				}
			}
			pool, err := postgres.Open(ctx, cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer pool.Close()
			migrator, err := postgres.NewMigrator(pool, logger)
			if err != nil {
				return err
			}
			defer func() { _ = migrator.Close() }()
			applied, err := migrator.Up(ctx)
			if err != nil {
				return err
			}
			current, _, err := migrator.Versions(ctx)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "applied %d migration(s); schema version %d\n", applied, current)
			return err
		},
	}
	cmd.Flags().BoolVar(&createDatabase, "create-database", false, "create the database first if it does not exist")
	return cmd
}
