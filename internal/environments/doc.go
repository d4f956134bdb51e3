// Package environments owns the registry of clusters the gateway serves —
// the environments table and credentials_generation_seq: validation of what
// admins register, the Postgres repository, the probe that gates
// registration and credential rotation, the periodic probes of the
// environments this replica owns, key rotation of the sealed credentials,
// and the Connector that makes the cluster pool hold the registered
// environments this replica owns. It publishes a Change after every registration,
// update and deletion; it never calls its subscribers.
//
// Who writes an environment's state (environments.state and its message):
// only this package, from two sources. The probe (registration, update,
// :verify, the probe loop) writes the whole status: reachability,
// permissions, version, class count. Between probes, the Connector records
// what the pool's health checks learn, and only reachability: READY becomes
// UNREACHABLE, and UNREACHABLE or PENDING becomes READY. It never overrides
// UNAUTHORIZED or DEGRADED, which only a probe can tell apart from READY.
// A probe result for settings that changed meanwhile (the row's generation
// moved) is dropped, and so is anything the owner's own loops write (probe
// rounds, reachability) once its claim is no longer current
// (membership.FenceSQL); an admin's :verify, registration or update is
// recorded by whichever replica serves it.
//
// It must never return, log or store credentials in the clear: they enter
// as a kubeconfig or explicit credentials, are sealed by internal/secrets,
// and leave only as a kubeconfig.Connection handed to the cluster client.
package environments
