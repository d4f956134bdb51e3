// Package gateway is the assembly of the storage gateway: New builds every
// part from the configuration, Run starts them, serves the API and stops
// them in order under one deadline. `storage-gateway serve` and the
// in-process end-to-end tests both call it; nothing else wires parts
// together. It owns no table; each table's owner is named in its package's
// doc (environments, volumes, snapshots, status, outbox, fleet, auth,
// membership).
//
// The runtime graph — who publishes, who subscribes:
//
//	clusters.Pool ── health, storage changes ──► environments.Connector (records reachability)
//	                                          ├► fleet.Feed (classes, staleness)
//	                                          ├► dcm.Registrar (capacity known: register)
//	                                          ├► volume reconciler (ready and synced: reconcile)
//	                                          └► snapshot reconciler (health, snapshot changes)
//	environments.Service ── registered, updated, deleted ──► environments.Connector (the pool follows)
//	  (here at once; on every replica through its Watch)
//	                                                      ├► fleet.Feed (environments)
//	                                                      ├► dcm.Registrar (register, deregister)
//	                                                      ├► probe reconciler (look again)
//	                                                      └► membership.Membership (claim at once)
//	membership.Membership ── gained, lost ──► environments.Connector (the pool holds owned ones)
//	                                       ├► fleet.Feed (watch, or show the owner's snapshot)
//	                                       ├► probe reconciler (probe what it gains)
//	                                       └► dcm.Registrar (register what it owns)
//	informers ► status.Follower ► status.Tracker ► outbox (with the record) ► outbox.Relay ► NATS
//
// The connector's connecting, the probes, the volume and snapshot
// reconcilers, the fleet feed and the DCM registrar are reconcilers on internal/controller (a
// keyed work queue). Background workers, each started and stopped here: the
// membership (heartbeat and rebalance), the registry watch, the connector,
// the probe reconciler, the status follower's sweep, the outbox relay, the
// volume and snapshot reconcilers, the fleet feed, the key-ring and token reloader
// (SIGHUP), audit pruning and, when configured, the DCM registrar. The
// hot paths' writes — a create's intent, its claim with the first status
// and event, every request's audit row — go through one postgres.Group, so
// concurrent requests share commits.
//
// Shutdown, one SG_SHUTDOWN_TIMEOUT for all of it: stop accepting HTTP →
// stop the background workers (all told at once, last started first) and
// the informers → flush the status tracker (still the owner: the fence
// would refuse it after; the membership heartbeat, started first, still
// renews the leases) → stop the heartbeat → leave the membership → drain
// the outbox → close NATS → close cluster connections → close the
// database; "stopped" is logged last.
package gateway
