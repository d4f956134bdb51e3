-- Connection, sealed credentials and probe status of each environment.
-- Non-secret connection facts (server, CA, TLS name) are
-- plain columns so they can be shown; the token or client key lives only in
-- `credentials`, sealed by internal/secrets under the key named in
-- `credentials_key_id` (indexed so key retirement can count its rows).

-- +goose Up
ALTER TABLE environments
    ADD COLUMN server                  text        NOT NULL,
    ADD COLUMN certificate_authority   bytea,
    ADD COLUMN tls_server_name         text        NOT NULL DEFAULT '',
    ADD COLUMN insecure_skip_verify    boolean     NOT NULL DEFAULT false,
    ADD COLUMN auth_type               text        NOT NULL
                                       CHECK (auth_type IN ('token', 'client_certificate')),
    ADD COLUMN credentials_key_id      text        NOT NULL,
    ADD COLUMN credentials             bytea       NOT NULL,
    ADD COLUMN credentials_update_time timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN state                   text        NOT NULL DEFAULT 'PENDING'
                                       CHECK (state IN ('PENDING', 'READY', 'DEGRADED', 'UNREACHABLE', 'UNAUTHORIZED')),
    ADD COLUMN status_message          text        NOT NULL DEFAULT '',
    ADD COLUMN kubernetes_version      text        NOT NULL DEFAULT '',
    ADD COLUMN storage_class_count     integer,
    ADD COLUMN last_probe_time         timestamptz,
    ADD COLUMN last_ready_time         timestamptz,
    ADD COLUMN dcm_registration        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- generation increases with every spec or credential change; updates
    -- compare it so a slow probe never overwrites a newer change.
    ADD COLUMN generation              bigint      NOT NULL DEFAULT 1;

CREATE INDEX environments_credentials_key_id ON environments (credentials_key_id);
CREATE INDEX environments_labels ON environments USING gin (labels jsonb_path_ops);

-- +goose Down
DROP INDEX environments_labels;
DROP INDEX environments_credentials_key_id;
ALTER TABLE environments
    DROP COLUMN server,
    DROP COLUMN certificate_authority,
    DROP COLUMN tls_server_name,
    DROP COLUMN insecure_skip_verify,
    DROP COLUMN auth_type,
    DROP COLUMN credentials_key_id,
    DROP COLUMN credentials,
    DROP COLUMN credentials_update_time,
    DROP COLUMN state,
    DROP COLUMN status_message,
    DROP COLUMN kubernetes_version,
    DROP COLUMN storage_class_count,
    DROP COLUMN last_probe_time,
    DROP COLUMN last_ready_time,
    DROP COLUMN dcm_registration,
    DROP COLUMN generation;
