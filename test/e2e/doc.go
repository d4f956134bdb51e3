// Package e2e holds end-to-end scenarios that run the gateway as users do:
// through the Makefile, as a real process, against real Postgres, NATS and
// harness clusters.
package e2e
