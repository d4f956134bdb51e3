package clusters

import (
	"context"
	"sync"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotv1client "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/typed/volumesnapshot/v1"
	"k8s.io/client-go/tools/cache"
)

// snapshotCaches are the VolumeSnapshots the gateway made in each of the
// environment's namespaces, watched from the first time they are asked for
// (Cluster.FollowSnapshots) until the connection stops. Most environments
// never hold a snapshot, and a namespace's informer costs four goroutines
// and a watch (BenchmarkIdleFleet counts them), so none runs before then.
// Not every grant includes snapshots, nor does every cluster serve their
// API: an informer that cannot list retries with backoff, and its cache
// stays unsynced (the snapshots' records answer meanwhile).
type snapshotCaches struct {
	// newInformer builds one namespace's informer.
	newInformer func(namespace string) *informer
	namespaces  []string

	mu sync.Mutex
	// ctx and group are the caches' run context and goroutines, once
	// they started; closed is set before shutdown waits for group.
	ctx     context.Context
	group   *sync.WaitGroup
	closed  bool
	wanted  bool
	running map[string]*informer // by namespace, once following
}

// start lets the informers run in group until ctx ends, at once if they
// were asked for already.
func (s *snapshotCaches) start(ctx context.Context, group *sync.WaitGroup) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.group = ctx, group
	s.run()
}

// follow asks for the informers; they start with the caches.
func (s *snapshotCaches) follow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wanted = true
	s.run()
}

// close keeps any informer from starting once shutdown waits for group.
func (s *snapshotCaches) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

// run starts the informers if they are wanted, the caches started and not
// closed, and they do not run yet. s.mu is held.
func (s *snapshotCaches) run() {
	if !s.wanted || s.ctx == nil || s.closed || s.running != nil {
		return
	}
	s.running = make(map[string]*informer, len(s.namespaces))
	for _, ns := range s.namespaces {
		inf := s.newInformer(ns)
		s.running[ns] = inf
		s.group.Go(func() { inf.run(s.ctx) })
	}
}

// get returns a cached snapshot; synced says the namespace's cache has
// listed (an unsynced one knows nothing, found or not).
func (s *snapshotCaches) get(namespace, name string) (snap *snapshotv1.VolumeSnapshot, found, synced bool) {
	s.mu.Lock()
	inf := s.running[namespace]
	s.mu.Unlock()
	if inf == nil || !inf.hasSynced() {
		return nil, false, false
	}
	obj, found, _ := inf.indexer.GetByKey(namespace + "/" + name)
	if !found {
		return nil, false, true
	}
	snap, ok := obj.(*snapshotv1.VolumeSnapshot)
	return snap, ok, true
}

// FollowSnapshots starts watching the VolumeSnapshots the gateway made in
// the environment's namespaces, if it does not yet: the snapshot service
// asks for it once the environment has a snapshot. Each change to one is
// published as a SnapshotChanged notice.
func (c *Cluster) FollowSnapshots() { c.caches.snapshots.follow() }

// Snapshot returns a VolumeSnapshot the gateway made, from the cache.
// synced is false while the cache cannot tell (not followed yet, or its
// first list has not succeeded): found is then false too.
func (c *Cluster) Snapshot(namespace, name string) (snap *snapshotv1.VolumeSnapshot, found, synced bool) {
	return c.caches.snapshots.get(namespace, name)
}

// SnapshotClient is for snapshot writes (create, delete), with the limits
// of Client's requests and over its connections.
func (c *Cluster) SnapshotClient() snapshotv1client.SnapshotV1Interface {
	c.Client()
	w := &c.writes
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snapshots
}

// newSnapshotInformer watches one namespace's VolumeSnapshots the gateway
// made; every change calls changed.
func newSnapshotInformer(client cacheClients, namespace string, changed func(), onError cache.WatchErrorHandlerWithContext) *informer {
	snaps := client.snapshots.VolumeSnapshots(namespace)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}
	return newInformer(informerOptions{name: "volumesnapshots in " + namespace,
		lw:      cache.ToListWatcherWithWatchListSemantics(listWatch(snaps.List, snaps.Watch, selectManaged), client.snapshots),
		example: &snapshotv1.VolumeSnapshot{}, indexers: namespaced, handler: notify, onError: onError})
}
