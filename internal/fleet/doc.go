// Package fleet owns the gateway's answer to "where can I get what storage?"
// (SPEC.md §2.3): an in-memory index of every environment's StorageClasses,
// with their capabilities, CSI driver facts and published capacity.
//
// The index is fed from the cluster pool's informers (Feed) and from the
// registry, and persisted (Store) so a restarted gateway still shows clusters
// it cannot reach, marked stale. Queries read only the index: they never call
// a cluster, never wait for one, and cost the same whether an environment is
// up or down. Each class is encoded to JSON when its environment changes,
// not per query, so a fleet-wide answer is mostly a copy.
package fleet
