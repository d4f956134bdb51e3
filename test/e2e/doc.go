// Package e2e holds end-to-end scenarios that run the gateway as users do:
// in process and as a real binary, against real Postgres, NATS, harness
// clusters and DCM's service-provider-manager.
//
// The scenarios share the two harness clusters. One that mostly waits (an
// outage, a timeout, a hand-over) and touches only what is its own — its
// database, NATS, gateway processes, volume ids, tenant namespaces — runs
// in parallel (t.Parallel) with the others like it, after the rest. One that
// changes a cluster for everyone (freezing east's path, restarting an API
// server) or reads what others may have put in a shared namespace
// (adoption, counting claims) does not.
package e2e
