package main

import (
	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/gateway"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/secrets"
)

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
	return fn(&registry{keys: keys, keyFile: file, service: environments.NewService(gateway.RegistryOptions(cfg, pool, keys, nil, logger))})
}
