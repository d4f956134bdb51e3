// Package events owns the gateway's link to NATS: connecting to an external
// server, or running an embedded JetStream-enabled server for one-command local
// runs. Later it also holds the outbox relay that publishes CloudEvents. It must
// not decide volume status; that belongs to the status package.
package events
