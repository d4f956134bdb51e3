-- Adopting another provider's volumes: a claim labelled for DCM
-- storage that no volume record serves is left alone until an admin adopts
-- it, and counted meanwhile. The environment's owner counts them on each
-- reconciler pass and after an adoption; the environment's status shows the
-- count (any replica answers it from here). A row is written only by the
-- owner, fenced like its other writes.
--
-- Placement offers only environments a create would be accepted
-- in now: fleet_snapshots.writable says the owner's connection is READY
-- with every cache synced (live alone says the classes are current).

-- +goose Up
CREATE TABLE unadopted_claims (
    environment_id text        PRIMARY KEY REFERENCES environments (id) ON DELETE CASCADE,
    count          integer     NOT NULL,
    count_time     timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE fleet_snapshots ADD COLUMN writable boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE fleet_snapshots DROP COLUMN writable;
DROP TABLE unadopted_claims;
