-- Fleet views. capability_overrides are an environment's
-- statement of what its classes support (capabilities.Overrides).
-- fleet_snapshots keep each environment's last known storage objects
-- (classes without secret-looking parameters, CSI drivers, capacities), so a
-- restarted gateway still shows a cluster it cannot reach, marked stale.
-- observed_time is the last time a gateway saw the data current.

-- +goose Up
ALTER TABLE environments ADD COLUMN capability_overrides jsonb NOT NULL DEFAULT '{}';

CREATE TABLE fleet_snapshots (
    environment_id text        PRIMARY KEY REFERENCES environments (id) ON DELETE CASCADE,
    objects        jsonb       NOT NULL,
    observed_time  timestamptz NOT NULL
);

-- +goose Down
DROP TABLE fleet_snapshots;
ALTER TABLE environments DROP COLUMN capability_overrides;
