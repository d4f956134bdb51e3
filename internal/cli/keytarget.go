package cli

import (
	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// keyTarget is what the offline key commands work on: a key ring file and
// the registry whose credentials it seals.
type keyTarget struct {
	keys     *secrets.KeyRing
	keyFile  string
	registry *environments.Service
}

// withKeyTarget opens the key ring at path and the database from SG_*
// settings and runs fn.
func withKeyTarget(cmd *cobra.Command, path func() (string, error), fn func(*keyTarget) error) error {
	cfg, logger, err := LoadConfig()
	if err != nil {
		return err
	}
	file, keys, err := loadRing(path)
	if err != nil {
		return err
	}
	db, err := postgres.Open(cmd.Context(), cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(&keyTarget{keys: keys, keyFile: file, registry: environments.New(cfg, db, keys, nil, logger)})
}
