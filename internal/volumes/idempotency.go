package volumes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/postgres"
)

// Key is an Idempotency-Key to remember with what its request creates: a
// volume, or a snapshot (whose creates are identified the same way, in the
// same table, so a key names one request of either kind).
type Key struct {
	Key, RequestSHA256 string
	// ID is the created resource's id.
	ID string
}

// Identify settles the id of what a create request makes: the id given
// (checked by ValidateID), or the one an earlier request with the same
// Idempotency-Key made, or a new one — returned with the key, which the
// caller stores with its record (QueueKey). A key used before with another
// request (request is hashed as JSON) is refused, naming the header.
func Identify(ctx context.Context, db *pgxpool.Pool, envID string, id *string, idempotencyKey string, request any) (*Key, error) {
	if *id != "" {
		return nil, ValidateID(*id)
	}
	if idempotencyKey == "" {
		return nil, fault.Invalid("id", "either the id query parameter or an Idempotency-Key header is required")
	}
	sum := sha256.Sum256(mustJSON(request))
	hash := hex.EncodeToString(sum[:])
	var knownHash, knownID string
	err := db.QueryRow(ctx, `SELECT request_sha256, volume_id FROM idempotency_keys WHERE environment_id = $1 AND key = $2`,
		envID, idempotencyKey).Scan(&knownHash, &knownID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		*id = uuid.NewString()
		return &Key{Key: idempotencyKey, RequestSHA256: hash, ID: *id}, nil
	case err != nil:
		return nil, err
	case knownHash != hash:
		return nil, &fault.Error{Kind: fault.FailedPrecondition, Field: "Idempotency-Key",
			Detail: "was used before with a different request"}
	}
	*id = knownID
	return nil, nil
}

// QueueKey queues the insert of key (if any) into b, fenced as the record
// it goes with is: by the owner's lease (membership.FenceSQL) and the
// environment's generation the request was decided under. A fence that
// fails writes nothing.
func QueueKey(b postgres.Batch, envID string, key *Key, lease membership.Lease, generation int64) {
	if key == nil {
		return
	}
	b.Queue(nil, `INSERT INTO idempotency_keys (environment_id, key, request_sha256, volume_id)
		SELECT $1, $2, $3, $4 WHERE `+membership.FenceSQL("$1::text", "$5", "$6")+` AND `+environments.GenerationSQL("$1::text", "$7"),
		envID, key.Key, key.RequestSHA256, key.ID, lease.Epoch, lease.Incarnation, generation)
}

// purgeKeys forgets every idempotency key older than age, of volumes and
// snapshots alike.
func (r *repository) purgeKeys(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := r.db.Exec(ctx, `DELETE FROM idempotency_keys WHERE create_time < now() - $1::interval`, age.String())
	return tag.RowsAffected(), err
}
