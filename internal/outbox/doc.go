// Package outbox owns the outbox table and the gateway's link to NATS: the
// Writer whose transactions (InsertTx) and single statements (committed
// with the process's other hot writes, postgres.Group) queue events and
// wake the relay with their ids once they commit, the Relay that claims
// those by id (and scans for the rest), publishes them in order, marks them
// sent and prunes sent ones past SG_OUTBOX_RETENTION, and the connection
// to an external server or an embedded JetStream-enabled one for
// one-command local runs. It must not decide volume status or build an
// event; that belongs to the status package.
package outbox
