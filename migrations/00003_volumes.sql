-- Volume records: one row per PVC the gateway manages for DCM.
-- The registry needs them to refuse deleting an environment that still has
-- volumes and to forget them with ?force=true (the PVCs stay in the cluster);
-- the volume API fills and extends them.

-- +goose Up
CREATE TABLE volumes (
    environment_id text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    id             text        NOT NULL,
    namespace      text        NOT NULL,
    spec           jsonb       NOT NULL,
    pvc_uid        text        NOT NULL DEFAULT '',
    status         text        NOT NULL DEFAULT 'PROVISIONING',
    status_message text        NOT NULL DEFAULT '',
    create_time    timestamptz NOT NULL DEFAULT now(),
    update_time    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment_id, id)
);

-- +goose Down
DROP TABLE volumes;
