-- Every replica shows every environment's classes: the owner of
-- an environment persists its snapshot and the others read it. live says
-- whether the owner watches the cluster now (the view's stale flag);
-- observed_time is what the owner's view shows (when the classes last
-- changed while live, when the cluster was lost once stale); seen_time is
-- the last time the owner saw them current (re-dated every minute, for a
-- restart with a dead cluster); revision moves with every save that
-- changes what a view shows, so other replicas read only those rows again.
--
-- volumes.volume_name is the PersistentVolume the claim is bound to, as
-- its owner last recorded it: the fleet-wide volume list, answered by any
-- replica from Postgres, names it without the owner's cache.
--
-- outbox.epoch is the ownership epoch of the replica that queued the event
-- (the fence let it write at that epoch): which owner reported what, after
-- a hand-over.

-- +goose Up
ALTER TABLE fleet_snapshots
    ADD COLUMN live      boolean     NOT NULL DEFAULT false,
    ADD COLUMN seen_time timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN revision  bigint      NOT NULL DEFAULT 1;
UPDATE fleet_snapshots SET seen_time = observed_time;
ALTER TABLE outbox ADD COLUMN epoch bigint;
ALTER TABLE volumes ADD COLUMN volume_name text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE volumes DROP COLUMN volume_name;
ALTER TABLE outbox DROP COLUMN epoch;
ALTER TABLE fleet_snapshots DROP COLUMN revision, DROP COLUMN seen_time, DROP COLUMN live;
