// Package clusters owns the gateway's connections to Kubernetes clusters: it
// turns allow-listed connection settings into a client whose every dial is
// checked by the egress policy and which never follows redirects, probes a
// cluster for reachability and the permissions the gateway needs, and keeps
// the cluster pool: per-environment clients, informer caches and health,
// whose changes it publishes to subscribers (it never calls them on a
// cluster's goroutine). Which environments the pool connects to is decided
// by environments.Connector; the pool owns no table. All
// of an environment's clients and probes share one rate limiter, and every
// answer read outside the informers is bounded in size. It
// must not read kubeconfig files or use client-go's config loaders, and never
// returns an API server's raw response text to callers.
package clusters
