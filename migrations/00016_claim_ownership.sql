-- A claim belongs to one environment of one installation. Every claim the
-- gateway makes is labelled with both; a claim labelled for another
-- environment or installation is never treated as the environment's own.
--
-- installation holds this installation's identity: one row, drawn by the
-- first gateway that needs it (not by this migration, so every copy of a
-- migrated template database, and every restored dump of another
-- database, is told apart only where it should be: a dump restored is the
-- same installation, a new database is a new one).
--
-- environments.cluster_id is the cluster's identity as the last probe read
-- it (the uid of its kube-system namespace, or, where the credentials may
-- not read it, the API server's address), so two environments on one
-- cluster namespace are found whichever URL each was registered with;
-- share_namespaces says an admin allowed this environment to serve
-- namespaces another environment of the same cluster serves.

-- +goose Up
CREATE TABLE installation (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    id         uuid        NOT NULL,
    create_time timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE environments ADD COLUMN cluster_id text NOT NULL DEFAULT '';
ALTER TABLE environments ADD COLUMN share_namespaces boolean NOT NULL DEFAULT false;
CREATE INDEX environments_cluster_id ON environments (cluster_id) WHERE cluster_id <> '';

-- +goose Down
DROP INDEX environments_cluster_id;
ALTER TABLE environments DROP COLUMN share_namespaces;
ALTER TABLE environments DROP COLUMN cluster_id;
DROP TABLE installation;
