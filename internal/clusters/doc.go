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
//
// One pool entry per environment: its own clients (watches; health checks;
// writes) and caches, managedFields stripped. Informers watch DCM-labelled
// claims in the environment's namespaces and StorageClasses; Warning events
// of claims are watched in a namespace only while it has a Pending claim
// (a warning explains a Pending claim and nothing else, and the list that
// starts the watch brings back every warning still kept); CSIDrivers and
// CSIStorageCapacities, which only the fleet view reads, are listed rather
// than watched — when the caches start, after a StorageClass change and
// every FactsInterval. Each informer is client-go's Reflector writing
// straight into a store that updates an indexer and tells the handlers
// (informer.go): neither client-go's controller, whose DeltaFIFO costs two
// goroutines more per informer, nor a shared informer, whose processor
// costs goroutines per informer and per handler. Clients speak
// protobuf, as Kubernetes' own controllers do, and ask for 30–60 minute
// watches (bookmarks still arrive every minute). Entries start in the
// background: a bounded number of first health checks at a time open their
// connections (a restart of a large fleet must not send every TLS
// handshake at once), then a bounded number of initial syncs, each with a
// deadline; a dead cluster never blocks another or any request. Health is
// `GET /readyz` 50 s after a good check, at once when a watch connection
// breaks, and 10 s after a failed one (two failures: UNREACHABLE; one
// success: READY). The pool keeps every entry's next check in one
// delaying queue and runs them on long-lived workers; a steady check is
// due on a whole second (rounded down, offset at random per replica), so
// the checks of a second wake the process once (a timer and a goroutine
// per check woke it once per check). Checks that may hang — the first,
// and any after a failure — run on a goroutine of their own, so a dead
// cluster holds no worker. Checks and watches share one HTTP/2 connection
// per entry (one handshake, one reader); a check that gets no answer
// closes it, so the next check dials afresh and the watches resume from
// where they were (a server that answers "not ready" keeps it). Since the
// checks find a dead connection, it sends no HTTP/2 pings while idle, as
// client-go's connections do every 30 s (the probe's and the writes' keep
// them). A credential rotation starts a new entry and retires the old one
// once the new one has synced; removing an entry stops every goroutine,
// watch and connection of it.
package clusters
