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
//
// A create records its intent (with the idempotency key) before it creates
// the claim, named by the volume id: a retry after a crash finds the record
// and creates exactly one claim. It is decided under the environment's spec
// as the registry holds it in memory; the intent's insert names the
// environment's generation, so a spec changed meanwhile writes nothing and
// the create is decided again on a fresh read. The reconciler (periodically, and for each
// cluster that becomes ready with synced caches) completes interrupted
// creates, stores the uid of claims whose create was interrupted after the
// claim existed, deletes claims created after their volume was deleted,
// marks volumes whose claim vanished DELETED, and counts the labelled
// claims no record serves (unadopted_claims). Adoption records such claims
// of another provider as volumes, each with its first status and event, in
// one fenced transaction; nothing is adopted implicitly.
//
// A claim belongs to one environment of one installation (pvc.go: owner):
// the gateway labels every claim it makes with both, and acts — shows,
// changes, deletes, settles, answers a create with — only on the
// environment's own claim: labelled for it, or, unlabelled (made before
// claims named their owner, or adopted from DCM's storage SP), the one its
// record holds by uid. A name match alone never makes a claim the
// environment's; another's answers 409 naming its holder.
//
// Beside DCM's contract, a create may fill the new volume from one of the
// environment's snapshots or volumes (source.go: its namespace, class and
// volume mode are the source's unless asked otherwise, checked before
// anything is written), and a volume's performance tier can be changed (tier.go),
// each new tier state reported as an event of its own (tier_events.go).
package volumes
