-- Who may do what and credentials that cannot be rolled back.
--
-- audit_events: every admin action and volume mutation — who (subject, name,
-- roles, how authenticated), what (the API operation), which environment and
-- volume, the HTTP status, request id, TCP peer and time. Never a secret.
-- Rows older than SG_AUDIT_RETENTION are pruned.
--
-- credentials_generation: a value from credentials_generation_seq, drawn for
-- every seal of an environment's credentials and bound into the sealed
-- blob's authenticated data, so a blob restored from before a rotation (or
-- from an earlier environment of the same id) no longer opens. 0 marks a
-- row sealed before this migration (format 1), re-sealed at the next start.
--
-- registered_by: the subject that registered the environment; only that
-- subject's identical replay answers 200, so a registration cannot be used
-- to test guessed credentials against the stored ones.

-- +goose Up
CREATE TABLE audit_events (
    id             bigserial   PRIMARY KEY,
    time           timestamptz NOT NULL DEFAULT now(),
    request_id     text        NOT NULL DEFAULT '',
    subject        text        NOT NULL,
    name           text        NOT NULL DEFAULT '',
    roles          text[]      NOT NULL DEFAULT '{}',
    auth_method    text        NOT NULL,
    action         text        NOT NULL,
    environment_id text        NOT NULL DEFAULT '',
    volume_id      text        NOT NULL DEFAULT '',
    status         integer     NOT NULL,
    peer           text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_time ON audit_events (time);
CREATE INDEX audit_events_subject ON audit_events (subject, id);
CREATE INDEX audit_events_environment ON audit_events (environment_id, id);

CREATE SEQUENCE credentials_generation_seq;
ALTER TABLE environments
    ADD COLUMN credentials_generation bigint NOT NULL DEFAULT 0,
    ADD COLUMN registered_by          text   NOT NULL DEFAULT '';

-- A Kubernetes version is kept only if it looks like one (clusters.Prober);
-- drop what earlier probes stored unchecked.
UPDATE environments SET kubernetes_version = ''
WHERE length(kubernetes_version) > 64
   OR kubernetes_version !~ '^v?[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,6}([-+][0-9A-Za-z.+_-]{1,48})?$';

-- +goose Down
-- Credentials sealed since (format 2) do not open for an older gateway:
-- going down is refused while any exist.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM environments WHERE credentials_generation > 0) THEN
        RAISE EXCEPTION 'credentials are sealed with generations; a gateway before migration 7 cannot open them';
    END IF;
END $$;
-- +goose StatementEnd
ALTER TABLE environments DROP COLUMN registered_by, DROP COLUMN credentials_generation;
DROP SEQUENCE credentials_generation_seq;
DROP TABLE audit_events;
