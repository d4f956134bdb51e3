-- +goose Up
-- A scrape of /metrics counts volumes by environment, status, StorageClass
-- and requested capacity. Those live in the spec document; stored copies
-- and an index over them let Postgres count from the index alone instead of
-- parsing every spec. The index replaces (environment_id, status), whose
-- queries it still serves, so writes maintain no more indexes than before.
ALTER TABLE volumes
    ADD COLUMN storage_class text GENERATED ALWAYS AS (coalesce(spec->>'storage_class', '')) STORED,
    ADD COLUMN capacity      text GENERATED ALWAYS AS (coalesce(spec->>'capacity', '')) STORED;
CREATE INDEX volumes_summary ON volumes (environment_id, status, storage_class, capacity);
DROP INDEX volumes_environment_status;

-- +goose Down
CREATE INDEX volumes_environment_status ON volumes (environment_id, status);
DROP INDEX volumes_summary;
ALTER TABLE volumes DROP COLUMN storage_class, DROP COLUMN capacity;
