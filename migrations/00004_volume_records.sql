-- Volume API: idempotency keys of the environment agent's
-- request shape (bare spec + Idempotency-Key, no id), kept at least 24 h so a
-- redelivery finds the volume it created; and the index the volume list and
-- the reconciler read by.

-- +goose Up
CREATE TABLE idempotency_keys (
    environment_id text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    key            text        NOT NULL,
    request_sha256 text        NOT NULL,
    volume_id      text        NOT NULL,
    create_time    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment_id, key)
);
CREATE INDEX idempotency_keys_create_time ON idempotency_keys (create_time);
CREATE INDEX volumes_environment_status ON volumes (environment_id, status);

-- +goose Down
DROP INDEX volumes_environment_status;
DROP TABLE idempotency_keys;
