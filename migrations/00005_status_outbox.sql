-- Volume status to DCM: the transactional outbox. A status
-- transition updates the volume record and inserts its CloudEvent here in
-- one transaction; the relay publishes rows in id order and marks them sent
-- after the JetStream ack. reported_status/_message are the last ones handed
-- to the outbox, so nothing is reported twice (resync, restart, several
-- replicas); transitions numbers the reported transitions and makes event ids
-- deterministic.

-- +goose Up
ALTER TABLE volumes
    ADD COLUMN reported_status  text   NOT NULL DEFAULT '',
    ADD COLUMN reported_message text   NOT NULL DEFAULT '',
    ADD COLUMN transitions      bigint NOT NULL DEFAULT 0;

-- No foreign keys: a volume's last events (DELETED) must still go out after
-- its environment was forgotten.
CREATE TABLE outbox (
    id             bigserial   PRIMARY KEY,
    event_id       text        NOT NULL UNIQUE,
    environment_id text        NOT NULL,
    volume_id      text        NOT NULL,
    status         text        NOT NULL,
    event          jsonb       NOT NULL,
    create_time    timestamptz NOT NULL DEFAULT now(),
    claimed_until  timestamptz,
    claim_token    uuid,
    attempts       integer     NOT NULL DEFAULT 0,
    sent_time      timestamptz
);
CREATE INDEX outbox_unsent ON outbox (id) WHERE sent_time IS NULL;
-- The relay claims only each volume's oldest unsent event (ordered delivery
-- across replicas); this index answers "is there an earlier one".
CREATE INDEX outbox_unsent_by_volume ON outbox (environment_id, volume_id, id) WHERE sent_time IS NULL;

-- +goose Down
DROP TABLE outbox;
ALTER TABLE volumes DROP COLUMN reported_status, DROP COLUMN reported_message, DROP COLUMN transitions;
