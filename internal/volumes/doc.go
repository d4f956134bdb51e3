// Package volumes owns DCM's storage service-provider contract for one
// environment: StorageSpec validation, class and mode resolution, the
// mapping between a volume and its PVC, idempotent create, expansion and
// delete, and the volume records in Postgres that make a retried or
// interrupted create converge on exactly one PVC. Reads come from the cluster
// pool's caches and the records; the cluster is only called to write (and,
// when a create collides with an existing claim, to look at that claim).
package volumes
