// Package events owns the gateway's link to NATS: connecting to an external
// server, or running an embedded JetStream-enabled server for one-command local
// runs, and the outbox relay that publishes the status CloudEvents
// internal/status queued in the outbox table, marks them sent and prunes sent
// ones past SG_OUTBOX_RETENTION. It must not decide volume status; that
// belongs to the status package.
package events
