// Package snapshots owns the snapshots of volumes: an extension beside
// DCM's storage contract (DCM's service-provider-manager never calls it;
// operators and automation do). A snapshot is a VolumeSnapshot of the
// volume's claim, named by the snapshot's id in the volume's namespace and
// labelled as the gateway's; the snapshot controller and the CSI driver's
// snapshotter cut it. The package owns the snapshots table.
//
// A create is identified as a volume's is (an id, or an Idempotency-Key,
// in the same table: volumes.Identify) and records its intent, fenced by
// the owner's lease and the environment's generation, before it creates
// the VolumeSnapshot: a retry after a crash finds the record and creates
// exactly one. The VolumeSnapshotClass is checked against the cluster's
// before anything is written: it must be one of the volume's driver, and
// without one named the driver's single default is recorded (the snapshot
// controller's own rule, which would leave the snapshot failed otherwise).
//
// Status comes from the cluster: the environment's VolumeSnapshots are
// watched from its first snapshot on (clusters.Cluster.FollowSnapshots),
// not before, so a fleet without snapshots pays nothing for them. READY is
// readyToUse, with the restore size; FAILED is the snapshot's error, which
// the snapshot controller may still retry past; PENDING is anything before.
// The reconciler keeps the records' status current, completes creates
// interrupted before their VolumeSnapshot existed, and records DELETED
// once a snapshot is gone. Every status change is recorded with its
// CloudEvent in one transaction (the outbox), on a subject of its own
// (EventSubject), so DCM's stream of volume events never holds one.
package snapshots
