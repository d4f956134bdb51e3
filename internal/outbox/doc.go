// Package outbox owns the outbox table and the gateway's link to NATS: the
// Writer whose transactions queue events (InsertTx) and wake the relay once
// they commit, the Relay that publishes queued events in order, marks them
// sent and prunes sent ones past SG_OUTBOX_RETENTION, and the connection
// to an external server or an embedded JetStream-enabled one for
// one-command local runs. It must not decide volume status or build an
// event; that belongs to the status package.
package outbox
