// Package status owns what DCM learns about volumes: the mapping from a PVC
// (and its class and warnings) to DCM's status and message, the follower
// that feeds it from the cluster pool's caches, the tracker's flap budget
// that keeps flapping calm without delaying a volume's lifecycle, and the
// transactional write of each transition: the volume's status columns and
// its CloudEvent, a new row of the outbox table, in one transaction, made
// only while this replica's claim on the environment holds (the fence
// refuses a former owner's late writes; the new owner records what it
// sees). It must not publish: internal/outbox relays (and later prunes) the
// outbox rows it writes.
package status
