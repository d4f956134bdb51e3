-- Snapshots of volumes: an extension beside DCM's storage contract. One
-- row per VolumeSnapshot the gateway makes, named by the snapshot's id in
-- its volume's namespace. The row is the intent, written (fenced by the
-- owner's lease and the environment's generation) before the
-- VolumeSnapshot is created, so a retry after a crash creates exactly one;
-- status, status_message and restore_size are the last ones observed.
-- A snapshot outlives its volume in the cluster, so its row does too; the
-- environment's deletion forgets both.
--
-- transitions numbers the recorded status changes, each of which queues a
-- CloudEvent in the outbox (in the same transaction) on a subject of its
-- own: outbox.subject, DCM's dcm.storage for every row before.
--
-- A volume's performance tier (its claim's VolumeAttributesClass, asked
-- for and applied) is reported the same way on a subject of its own:
-- reported_tier is the last state handed to the outbox, tier_transitions
-- numbers them.
--
-- An Idempotency-Key names what its request created: idempotency_keys'
-- volume_id holds a snapshot's id for a snapshot's create (the column keeps
-- its name, so replicas of the release before read it during an upgrade).

-- +goose Up
CREATE TABLE snapshots (
    environment_id text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    id             text        NOT NULL,
    volume_id      text        NOT NULL,
    namespace      text        NOT NULL,
    snapshot_class text        NOT NULL DEFAULT '',
    uid            text        NOT NULL DEFAULT '',
    status         text        NOT NULL DEFAULT 'PENDING',
    status_message text        NOT NULL DEFAULT '',
    restore_size   text        NOT NULL DEFAULT '',
    transitions    bigint      NOT NULL DEFAULT 0,
    create_time    timestamptz NOT NULL DEFAULT now(),
    update_time    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment_id, id)
);
CREATE INDEX snapshots_volume ON snapshots (environment_id, volume_id, id);
CREATE INDEX snapshots_live ON snapshots (environment_id) WHERE status <> 'DELETED';
ALTER TABLE outbox ADD COLUMN subject text NOT NULL DEFAULT 'dcm.storage';
ALTER TABLE volumes
    ADD COLUMN reported_tier    text   NOT NULL DEFAULT '',
    ADD COLUMN tier_transitions bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE volumes DROP COLUMN reported_tier, DROP COLUMN tier_transitions;
ALTER TABLE outbox DROP COLUMN subject;
DROP TABLE snapshots;
