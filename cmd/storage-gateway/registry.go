package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// loadKeyRing reads SG_KEY_RING_FILE; the gateway never runs without one,
// since it could neither seal new credentials nor open stored ones.
func loadKeyRing(cfg config.Config) (*secrets.KeyRing, error) {
	if cfg.KeyRingFile == "" {
		return nil, errors.New("SG_KEY_RING_FILE: must name the key ring file that seals cluster credentials " +
			"(create one with `storage-gateway keys init --file PATH`)")
	}
	ring, err := secrets.LoadKeyRing(cfg.KeyRingFile)
	if err != nil {
		return nil, fmt.Errorf("SG_KEY_RING_FILE: %w", err)
	}
	return ring, nil
}

// newEnvironmentService wires the registry with the operator's connection
// policy; clusterPool and limiters are nil for offline tools.
func newEnvironmentService(cfg config.Config, db *pgxpool.Pool, keys *secrets.KeyRing, clusterPool *clusters.Pool,
	limiters *clusters.Limiters, logger *slog.Logger, hooks ...func(*environments.Options)) *environments.Service {
	opts := environments.Options{
		DB:   db,
		Keys: keys,
		Pool: clusterPool,
		Prober: clusters.NewProber(clusters.ProberOptions{
			Client:      clusters.ClientOptions{Egress: cfg.EgressPolicy()},
			Timeout:     cfg.ProbeTimeout,
			Limiters:    limiters,
			Concurrency: cfg.ProbeConcurrency,
		}),
		AllowInsecure: cfg.AllowInsecureClusters,
		Logger:        logger,
	}
	for _, hook := range hooks {
		hook(&opts)
	}
	return environments.NewService(opts)
}

// registry is what the offline key commands work on.
type registry struct {
	keys    *secrets.KeyRing
	keyFile string
	service *environments.Service
}

// withRegistry opens the key ring at path and the database from SG_* settings
// and runs fn.
func withRegistry(cmd *cobra.Command, path func() (string, error), fn func(*registry) error) error {
	cfg, logger, err := loadConfig()
	if err != nil {
		return err
	}
	file, err := path()
	if err != nil {
		return err
	}
	keys, err := secrets.LoadKeyRing(file)
	if err != nil {
		return err
	}
	pool, err := postgres.Open(cmd.Context(), cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(&registry{keys: keys, keyFile: file, service: newEnvironmentService(cfg, pool, keys, nil, nil, logger)})
}
