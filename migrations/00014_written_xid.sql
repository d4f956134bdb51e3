-- What replicas follow in each other's writes — the registry's rows, the
-- owners' fleet snapshots — is read incrementally: written_xid is the
-- transaction that last changed what they follow in a row, and a reader
-- asks only for the rows written by transactions at or after the oldest
-- one still running when it last read (the horizon, pg_snapshot_xmin), so
-- a transaction that commits after a read is found by the next one. A
-- write that changes nothing followed (a probe's date, a re-dated
-- snapshot, a re-sealed credential) keeps its row's written_xid. The index
-- lets an idle fleet's read touch no row.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION mark_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.written_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

ALTER TABLE environments ADD COLUMN written_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX environments_written_xid ON environments (written_xid);
CREATE TRIGGER environments_written BEFORE UPDATE ON environments FOR EACH ROW
    WHEN (OLD.generation IS DISTINCT FROM NEW.generation
       OR OLD.credentials_generation IS DISTINCT FROM NEW.credentials_generation
       OR OLD.state IS DISTINCT FROM NEW.state
       OR OLD.dcm_registration IS DISTINCT FROM NEW.dcm_registration)
    EXECUTE FUNCTION mark_written();

ALTER TABLE fleet_snapshots ADD COLUMN written_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX fleet_snapshots_written_xid ON fleet_snapshots (written_xid);
CREATE TRIGGER fleet_snapshots_written BEFORE UPDATE ON fleet_snapshots FOR EACH ROW
    WHEN (OLD.revision IS DISTINCT FROM NEW.revision)
    EXECUTE FUNCTION mark_written();

-- +goose Down
DROP TRIGGER fleet_snapshots_written ON fleet_snapshots;
ALTER TABLE fleet_snapshots DROP COLUMN written_xid;
DROP TRIGGER environments_written ON environments;
ALTER TABLE environments DROP COLUMN written_xid;
DROP FUNCTION mark_written();
