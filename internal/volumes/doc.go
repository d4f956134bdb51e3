// Package volumes owns DCM's storage service-provider contract for one
// environment: StorageSpec validation, class and mode resolution, the
// mapping between a volume and its PVC, idempotent create, expansion and
// delete, the fleet-wide volume list, and the reconciler that repairs what
// interrupted flows left behind. It owns the volumes and idempotency_keys
// tables; their status columns (status, reported_*, transitions) are written
// by internal/status, in the transaction that queues the transition's event.
// Reads come from the cluster pool's caches and the records; the cluster is
// only called to write (and, when a create collides with an existing claim,
// to look at that claim).
package volumes
