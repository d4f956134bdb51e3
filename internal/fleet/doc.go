// Package fleet owns the gateway's answer to "where can I get what storage?":
// an in-memory index of every environment's StorageClasses,
// with their capabilities, CSI driver facts and published capacity.
//
// The index is fed by subscribing to the cluster pool's, the registry's and
// the ownership's changes (Feed), and persisted in the fleet_snapshots table
// (Store), which this package owns: the environment's owner writes its row
// (fenced by its claim) and every other replica shows what the row says, so
// every replica answers the same, and a restarted gateway still shows
// clusters it cannot reach, marked stale. Queries read only the index: they never call
// a cluster, never wait for one, and cost the same whether an environment is
// up or down. Each class is encoded to JSON, and made the series /metrics
// serves (metrics.go), when its environment's view changes, not per query
// or scrape, so a fleet-wide answer is mostly a copy.
//
// A query reads the index under a read lock: it filters on precomputed
// compact fields, groups by interned class name (counting sort), summarizes
// and streams the pre-encoded details in 64 KiB writes. A placement reads
// the same index: each class's placement facts (capacity segments with
// their maximum volume sizes, the default namespace's quota headroom, its
// JSON head and tail) are prepared when its environment's view renders; a
// question checks them, packs each candidate's rank into one integer
// (unknowns, room, default class, index order), sorts the integers and
// writes the prepared JSON.
package fleet
