// Package events owns the gateway's link to NATS: connecting to an external
// server, or running an embedded JetStream-enabled server for one-command local
// runs, and the outbox relay that publishes status CloudEvents to DCM. It must
// not decide volume status; that belongs to the status package.
package events
