-- +goose Up
-- When an environment's credentials stop working, where they say so (a
-- bearer token's exp claim, a client certificate's NotAfter): the gateway
-- warns before it comes. NULL for credentials without an expiry.
ALTER TABLE environments ADD COLUMN credentials_expire_time timestamptz;

-- +goose Down
ALTER TABLE environments DROP COLUMN credentials_expire_time;
