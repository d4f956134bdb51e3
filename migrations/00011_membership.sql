-- +goose Up
-- Replicas as members: each heartbeats its row with the
-- database's clock and is live while its heartbeat is younger than the
-- lease. incarnation changes at every start, so a process that finds its
-- id taken over (a restarted replica with the same id) knows it is no
-- longer the member.
CREATE TABLE members (
    id             text        PRIMARY KEY,
    incarnation    uuid        NOT NULL,
    advertise_url  text        NOT NULL DEFAULT '',
    start_time     timestamptz NOT NULL DEFAULT now(),
    heartbeat_time timestamptz NOT NULL DEFAULT now()
);

-- Who owns each environment: a member in one incarnation (a restarted
-- replica claims its environments again). epoch increases at every claim,
-- compared and set in the claiming statement; member_id is NULL once its
-- owner released it.
CREATE TABLE environment_owners (
    environment_id text        PRIMARY KEY REFERENCES environments (id) ON DELETE CASCADE,
    member_id      text,
    incarnation    uuid,
    epoch          bigint      NOT NULL,
    claim_time     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX environment_owners_member ON environment_owners (member_id);

-- +goose Down
DROP TABLE environment_owners;
DROP TABLE members;
