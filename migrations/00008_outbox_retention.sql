-- +goose Up
-- Sent status events are kept for SG_OUTBOX_RETENTION (default 24 h), then
-- pruned by the relay, oldest first: this index finds them.
CREATE INDEX outbox_sent ON outbox (sent_time) WHERE sent_time IS NOT NULL;

-- +goose Down
DROP INDEX outbox_sent;
