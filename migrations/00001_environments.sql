-- The environment registry: one row per registered cluster target.
-- Credentials are stored only as envelope-encrypted ciphertext.

-- +goose Up
CREATE TABLE environments (
    id                  text        PRIMARY KEY
                                    CHECK (id ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    display_name        text        NOT NULL DEFAULT '',
    description         text        NOT NULL DEFAULT '',
    labels              jsonb       NOT NULL DEFAULT '{}'::jsonb,
    region              text        NOT NULL DEFAULT '',
    zone                text        NOT NULL DEFAULT '',
    namespace           text        NOT NULL,
    allowed_namespaces  text[]      NOT NULL DEFAULT '{}',
    defaults            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    dcm                 jsonb       NOT NULL DEFAULT '{}'::jsonb,
    create_time         timestamptz NOT NULL DEFAULT now(),
    update_time         timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE environments;
