package snapshots

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/volumes"
)

// Sources answer the volume service for the snapshots a volume is
// restored from, from the records: the volume service is built before
// the snapshot service, which depends on it.
type Sources struct{ DB *pgxpool.Pool }

var _ volumes.SnapshotSources = Sources{}

// SnapshotSource returns one of the environment's snapshots.
func (s Sources) SnapshotSource(ctx context.Context, envID, id string) (volumes.SnapshotSource, bool, error) {
	var src volumes.SnapshotSource
	err := s.DB.QueryRow(ctx, `SELECT volume_id, namespace, status, restore_size FROM snapshots WHERE environment_id = $1 AND id = $2`,
		envID, id).Scan(&src.VolumeID, &src.Namespace, &src.Status, &src.RestoreSize)
	if errors.Is(err, pgx.ErrNoRows) {
		return src, false, nil
	}
	return src, err == nil, err
}
