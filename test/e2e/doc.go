// Package e2e holds end-to-end scenarios that run the gateway as users do:
// in process and as a real binary, against real Postgres, NATS, harness
// clusters and DCM's service-provider-manager.
package e2e
