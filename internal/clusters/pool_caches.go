package clusters

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotv1client "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/typed/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
)

// ManagedByLabel marks the PVCs the gateway manages, with ManagedByValue;
// the pool caches only PVCs carrying it.
const (
	ManagedByLabel = "dcm.project/managed-by"
	ManagedByValue = "dcm"
)

// connectTimeout is when a watch connection gives up: egress dials and
// client-go's TLS handshakes both time out after 10s.
const connectTimeout = 10 * time.Second

// Names of the cluster-wide storage caches.
const (
	cacheStorageClasses = "storageclasses"
	cacheCSIDrivers     = "csidrivers"
	cacheCapacities     = "csistoragecapacities"
	cacheQuotas         = "resourcequotas"
	cacheSnapshotClass  = "volumesnapshotclasses"
	cacheTiers          = "volumeattributesclasses"
)

// byInvolvedPVC indexes events by the namespace/name of their PVC.
const byInvolvedPVC = "involvedPVC"

// caches are what the gateway knows of one cluster: informers of the
// DCM-managed PVCs in each of the environment's namespaces and of the
// StorageClasses, Warning events on PVCs while a namespace has a Pending
// claim, and the listed CSIDrivers and CSIStorageCapacities.
type caches struct {
	client     cacheClients
	namespaces []string
	// informers run from start to shutdown; each namespace's warnings run
	// only while it has a Pending claim.
	informers   []*informer
	classes     *informer // among informers: the fleet view waits for it
	facts       *facts
	started     atomic.Bool
	byNamespace map[string]namespaceCaches
	classLister storagelisters.StorageClassLister
	drivers     storagelisters.CSIDriverLister
	capacities  storagelisters.CSIStorageCapacityLister
	quotas      *listed
	// snapshotClasses and tiers (VolumeAttributesClasses) are listed where
	// the gateway may read them.
	snapshotClasses, tiers *listed
	// snapshots are the gateway's VolumeSnapshots, once followed.
	snapshots *snapshotCaches
	// running holds every informer's goroutine, the warnings' too.
	running sync.WaitGroup
}

type namespaceCaches struct {
	pvcs corelisters.PersistentVolumeClaimNamespaceLister
	// claims is the store beneath pvcs: it holds this namespace's claims
	// alone, so listing them needs no namespace index.
	claims      cache.Indexer
	pvcHandlers *fanout
	warnings    *warnings
}

// namespaced lets namespaced listers find their objects.
var namespaced = cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}

// cacheClients are the typed clients the caches list and watch through:
// the API groups they read, not a clientset's every group.
type cacheClients struct {
	core      corev1client.CoreV1Interface
	storage   storagev1client.StorageV1Interface
	snapshots snapshotv1client.SnapshotV1Interface
}

func newCacheClients(cfg *rest.Config, client *http.Client) (cacheClients, error) {
	core, err := corev1client.NewForConfigAndClient(cfg, client)
	if err != nil {
		return cacheClients{}, fmt.Errorf("build cluster client: %w", err)
	}
	storage, err := storagev1client.NewForConfigAndClient(cfg, client)
	if err != nil {
		return cacheClients{}, fmt.Errorf("build cluster client: %w", err)
	}
	// The snapshot API is a custom resource, which API servers serve in
	// JSON alone.
	jsonCfg := rest.CopyConfig(cfg)
	jsonCfg.ContentType, jsonCfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	snapshots, err := snapshotv1client.NewForConfigAndClient(jsonCfg, client)
	if err != nil {
		return cacheClients{}, fmt.Errorf("build cluster client: %w", err)
	}
	return cacheClients{core: core, storage: storage, snapshots: snapshots}, nil
}

// newCaches sets up the informers without starting them; onStorage is
// called after every change to a cached StorageClass, CSIDriver or
// CSIStorageCapacity, from an informer or listing goroutine, and
// onSnapshot after every change to a followed VolumeSnapshot. CSIDrivers
// and CSIStorageCapacities are listed again every factsInterval.
func newCaches(client cacheClients, namespaces []string, logger *slog.Logger, onStorage, onSnapshot func(), factsInterval time.Duration) *caches {
	c := &caches{client: client, namespaces: namespaces, byNamespace: map[string]namespaceCaches{}, facts: &facts{interval: factsInterval}}
	c.snapshots = &snapshotCaches{namespaces: namespaces, newInformer: func(ns string) *informer {
		return newSnapshotInformer(client, ns, onSnapshot, logCacheFailure(logger, "volumesnapshots in "+ns))
	}}
	add := func(name string, lw *cache.ListWatch, example runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler) *informer {
		inf := newInformer(informerOptions{name: name, lw: cache.ToListWatcherWithWatchListSemantics(lw, client.core), example: example,
			indexers: indexers, handler: handler, onError: logCacheFailure(logger, name)})
		c.informers = append(c.informers, inf)
		return inf
	}
	for _, ns := range namespaces {
		claims, events := client.core.PersistentVolumeClaims(ns), client.core.Events(ns)
		name := "events in " + ns
		w := &warnings{pending: map[string]bool{}, newInformer: func() *informer {
			return newInformer(informerOptions{name: name, lw: cache.ToListWatcherWithWatchListSemantics(listWatch(events.List, events.Watch, selectPVCWarnings), client.core),
				example: &corev1.Event{}, indexers: cache.Indexers{byInvolvedPVC: involvedPVC}, handler: ignore, onError: logCacheFailure(logger, name)})
		}}
		// The warnings hear of every claim first, so they watch before
		// anyone maps a Pending claim.
		handlers := &fanout{handlers: []cache.ResourceEventHandler{w}}
		pvcs := add("persistentvolumeclaims in "+ns, listWatch(claims.List, claims.Watch, selectManaged), &corev1.PersistentVolumeClaim{}, namespaced, handlers)
		handlers.indexer = pvcs.indexer
		c.byNamespace[ns] = namespaceCaches{
			pvcs:        corelisters.NewPersistentVolumeClaimLister(pvcs.indexer).PersistentVolumeClaims(ns),
			claims:      pvcs.indexer,
			pvcHandlers: handlers,
			warnings:    w,
		}
	}
	storage := client.storage
	classes, drivers, capacities := storage.StorageClasses(), storage.CSIDrivers(), storage.CSIStorageCapacities(metav1.NamespaceAll)
	// A StorageClass change asks for the facts to be listed again too (the
	// initial list does not: the facts are listed with it).
	changed := func() { c.facts.want(); onStorage() }
	classChanged := cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, isInInitialList bool) {
			if isInInitialList {
				onStorage()
				return
			}
			changed()
		},
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}
	c.classes = add(cacheStorageClasses, listWatch(classes.List, classes.Watch, nil), &storagev1.StorageClass{}, cache.Indexers{}, classChanged)
	c.classLister = storagelisters.NewStorageClassLister(c.classes.indexer)
	// Capacities and quotas change as volumes come and go: listed every
	// interval. Drivers, snapshot classes and tiers change as storage is
	// installed, mostly with a StorageClass, which lists them at once:
	// every third interval is enough, and keeps an idle environment's
	// requests down.
	const configuration = 3
	fact := func(name string, list func(context.Context) ([]any, error), indexers cache.Indexers, optional bool, every int) *listed {
		l := &listed{name: name, list: list, indexer: cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, indexers),
			changed: onStorage, optional: optional, every: every}
		c.facts.caches = append(c.facts.caches, l)
		return l
	}
	c.drivers = storagelisters.NewCSIDriverLister(fact(cacheCSIDrivers, listAll(drivers.List), cache.Indexers{}, false, configuration).indexer)
	c.capacities = storagelisters.NewCSIStorageCapacityLister(fact(cacheCapacities, listAll(capacities.List), namespaced, false, 1).indexer)
	// The quotas of the namespace a volume lands in unless it asks for
	// another (the first): what placement checks a request against. Not
	// every grant includes them.
	if len(namespaces) > 0 {
		c.quotas = fact(cacheQuotas, listAll(client.core.ResourceQuotas(namespaces[0]).List), namespaced, true, 1)
	}
	// Which drivers can snapshot, and the performance tiers on offer: not
	// every grant includes them, nor does every cluster serve their APIs.
	c.snapshotClasses = fact(cacheSnapshotClass, listAll(client.snapshots.VolumeSnapshotClasses().List), cache.Indexers{}, true, configuration)
	c.tiers = fact(cacheTiers, listAll(storage.VolumeAttributesClasses().List), cache.Indexers{}, true, configuration)
	return c
}

// listAll lists every object through a typed client's List.
func listAll[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error)) func(context.Context) ([]any, error) {
	return func(ctx context.Context) ([]any, error) {
		got, err := list(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		objs, err := meta.ExtractList(got)
		out := make([]any, len(objs))
		for i, obj := range objs {
			out[i] = obj
		}
		return out, err
	}
}

// listWatch lists and watches through a typed client's List and Watch,
// selecting (when set) only what the gateway needs.
func listWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), selectWhat func(*metav1.ListOptions)) *cache.ListWatch {
	tweak := func(o metav1.ListOptions) metav1.ListOptions {
		if selectWhat != nil {
			selectWhat(&o)
		}
		return o
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return list(ctx, tweak(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return watchFn(ctx, tweak(o))
		},
	}
}

func selectManaged(o *metav1.ListOptions) {
	o.LabelSelector = labels.Set{ManagedByLabel: ManagedByValue}.String()
}

func selectPVCWarnings(o *metav1.ListOptions) {
	o.FieldSelector = fields.Set{"type": corev1.EventTypeWarning, "involvedObject.kind": "PersistentVolumeClaim"}.String()
}

func involvedPVC(obj any) ([]string, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return nil, nil
	}
	return []string{e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name}, nil
}

// stripUnused drops metadata the gateway never reads before an object is
// cached: managed fields are often the bulk of an object, and the
// last-applied annotation repeats all of it.
func stripUnused(obj any) any {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj // not an object (a deletion tombstone): nothing to strip
	}
	m.SetManagedFields(nil)
	delete(m.GetAnnotations(), corev1.LastAppliedConfigAnnotation)
	return obj
}

// logCacheFailure replaces client-go's default, which logs the reflector's
// error text (API server words) through klog on every retry.
func logCacheFailure(logger *slog.Logger, name string) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, _ *cache.Reflector, err error) {
		logger.DebugContext(ctx, "cluster cache list or watch failed; retrying with backoff", "cache", name, "reason", cacheFailure(err))
	}
}

func cacheFailure(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return fmt.Sprintf("the API server answered with HTTP status %d", status.Status().Code)
	}
	_, message := classify(context.Background(), err, connectTimeout)
	return message
}

// count is how many caches the cluster always keeps and needs: informers
// and the listed facts but the optional ones (each namespace's warnings run
// only while it has a Pending claim).
func (c *caches) count() int {
	n := len(c.informers)
	for _, l := range c.facts.caches {
		if !l.optional {
			n++
		}
	}
	return n
}

// start runs every informer until ctx ends. client-go's reflectors retry a
// failed LIST or WATCH with jittered exponential backoff from 0.8s, capped at
// 30s (30-60s with jitter), so once backed off a failing cluster costs each
// informer a few requests a minute (TestFailingClusterIsNotHammered counts
// them over the first seconds, where retries are densest).
func (c *caches) start(ctx context.Context) {
	for _, ns := range c.namespaces {
		c.byNamespace[ns].warnings.start(ctx, &c.running)
	}
	for _, inf := range c.informers {
		c.running.Go(func() { inf.run(ctx) })
	}
	c.snapshots.start(ctx, &c.running)
	c.started.Store(true)
	c.refreshFacts(ctx)
}

// refreshFacts lists the listed facts again, on a goroutine of its own
// that ends with the listing, when they were never listed, a StorageClass
// changed, or the facts interval passed. Nothing is listed before the
// caches start (the cluster waits for a sync slot). The cluster's run
// goroutine calls it (after each good health check); it ends before
// shutdown waits.
func (c *caches) refreshFacts(ctx context.Context) {
	if !c.started.Load() || ctx.Err() != nil {
		return
	}
	if periodic, ok := c.facts.due(time.Now()); ok {
		c.running.Go(func() { c.facts.refresh(ctx, requestTimeout, periodic) })
	}
}

// shutdown waits for the informers to exit; their context must be done.
func (c *caches) shutdown() {
	c.snapshots.close()
	c.running.Wait()
}

// unsynced names the caches that have not synced yet.
func (c *caches) unsynced() []string {
	var names []string
	for _, inf := range c.informers {
		if !inf.hasSynced() {
			names = append(names, inf.name)
		}
	}
	for _, l := range c.facts.caches {
		if !l.optional && !l.synced.Load() {
			names = append(names, l.name)
		}
	}
	for _, ns := range c.namespaces {
		if name, ok := c.byNamespace[ns].warnings.unsynced(); ok {
			names = append(names, name)
		}
	}
	return names
}

// onPVC adds h to every namespace's claims; it first receives the cached
// claims as adds.
func (c *caches) onPVC(h cache.ResourceEventHandler) {
	for _, ns := range c.namespaces {
		c.byNamespace[ns].pvcHandlers.add(h)
	}
}

// PVC returns a DCM-managed PVC from the cache.
func (c *Cluster) PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool) {
	nc, ok := c.caches.byNamespace[namespace]
	if !ok {
		return nil, false
	}
	pvc, err := nc.pvcs.Get(name)
	return pvc, err == nil
}

// PVCs returns every DCM-managed PVC in the environment's namespaces, in
// namespace order (the default first), then by name.
func (c *Cluster) PVCs() []*corev1.PersistentVolumeClaim {
	var all []*corev1.PersistentVolumeClaim
	for _, ns := range c.caches.namespaces {
		// The status follower asks every few seconds of every cluster,
		// most of which hold no claim: an empty store answers without
		// allocating, where the lister's namespace index allocated and
		// hashed for each.
		objs := c.caches.byNamespace[ns].claims.List()
		pvcs := make([]*corev1.PersistentVolumeClaim, 0, len(objs))
		for _, obj := range objs {
			// What a server lists is its own word: only this namespace's.
			if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Namespace == ns {
				pvcs = append(pvcs, pvc)
			}
		}
		slices.SortFunc(pvcs, byName)
		all = append(all, pvcs...)
	}
	return all
}

// StorageClass returns a StorageClass from the cache.
func (c *Cluster) StorageClass(name string) (*storagev1.StorageClass, bool) {
	class, err := c.caches.classLister.Get(name)
	return class, err == nil
}

// ClassOf returns the StorageClass pvc names, and whether that class is
// known to be gone: named, the class cache synced, and not in it. (A class
// not found before the cache synced is unknown, not gone.)
func (c *Cluster) ClassOf(pvc *corev1.PersistentVolumeClaim) (class *storagev1.StorageClass, gone bool) {
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return nil, false
	}
	class, ok := c.StorageClass(*pvc.Spec.StorageClassName)
	return class, !ok && c.caches.classes.hasSynced()
}

// StorageClasses returns every StorageClass, by name.
func (c *Cluster) StorageClasses() []*storagev1.StorageClass {
	classes, _ := c.caches.classLister.List(labels.Everything())
	slices.SortFunc(classes, byName)
	return classes
}

// DefaultStorageClass returns the class Kubernetes gives a PVC without one.
func (c *Cluster) DefaultStorageClass() (*storagev1.StorageClass, bool) {
	found := capabilities.DefaultClass(c.StorageClasses())
	return found, found != nil
}

// StorageSynced reports whether the StorageClass, CSIDriver and
// CSIStorageCapacity caches have synced, whatever the claim and event
// caches do (the fleet view needs only these).
func (c *Cluster) StorageSynced() bool {
	if !c.caches.classes.hasSynced() {
		return false
	}
	for _, l := range c.caches.facts.caches {
		if !l.synced.Load() {
			return false
		}
	}
	return true
}

// CSIDrivers returns every CSIDriver, by name.
func (c *Cluster) CSIDrivers() []*storagev1.CSIDriver {
	drivers, _ := c.caches.drivers.List(labels.Everything())
	slices.SortFunc(drivers, byName)
	return drivers
}

// StorageObjects returns the cached classes, CSI drivers, capacities, the
// default namespace's quotas, the snapshot classes and the tiers (or that
// the last three may not be read).
func (c *Cluster) StorageObjects() capabilities.Objects {
	objs := capabilities.Objects{Classes: c.StorageClasses(), Drivers: c.CSIDrivers(), Capacities: c.CSIStorageCapacities()}
	if q := c.caches.quotas; q != nil {
		objs.Quotas, objs.QuotasDenied = listedObjects[*corev1.ResourceQuota](q)
	}
	objs.SnapshotClasses, objs.SnapshotClassesDenied = listedObjects[*snapshotv1.VolumeSnapshotClass](c.caches.snapshotClasses)
	objs.Tiers, objs.TiersDenied = listedObjects[*storagev1.VolumeAttributesClass](c.caches.tiers)
	return objs
}

// listedObjects are the objects of a listed cache, by namespace and name,
// and whether the gateway may not list them.
func listedObjects[T metav1.Object](l *listed) ([]T, bool) {
	var out []T
	for _, obj := range l.indexer.List() {
		out = append(out, obj.(T))
	}
	slices.SortFunc(out, byName)
	return out, l.denied.Load()
}

// StorageRequested says the gateway changed what the claims of the
// environment request (a create, an expansion, a deletion): the quotas'
// usage moved, so the listed facts are listed again at the next chance (a
// health check, every few seconds), not at the next facts interval. A
// burst of changes costs one listing.
func (c *Cluster) StorageRequested() { c.caches.facts.want() }

// CSIStorageCapacities returns every CSIStorageCapacity, by namespace and
// name.
func (c *Cluster) CSIStorageCapacities() []*storagev1.CSIStorageCapacity {
	capacities, _ := c.caches.capacities.List(labels.Everything())
	slices.SortFunc(capacities, byName)
	return capacities
}

// WarningEvents returns the Warning events whose involved object is the
// named PVC, newest first.
func (c *Cluster) WarningEvents(namespace, pvcName string) []*corev1.Event {
	nc, ok := c.caches.byNamespace[namespace]
	if !ok {
		return nil
	}
	objs := nc.warnings.of(namespace + "/" + pvcName)
	events := make([]*corev1.Event, 0, len(objs))
	for _, obj := range objs {
		events = append(events, obj.(*corev1.Event))
	}
	slices.SortFunc(events, func(a, b *corev1.Event) int { return lastSeen(b).Compare(lastSeen(a)) })
	return events
}

// lastSeen is when an event last happened, whichever API wrote it.
func lastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func byName[T metav1.Object](a, b T) int {
	return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
}

// TotalCapacity sums the capacity the cluster's CSI drivers publish
// (CSIStorageCapacity objects); false when none is published.
func (c *Cluster) TotalCapacity() (resource.Quantity, bool) {
	var total resource.Quantity
	found := false
	for _, capacity := range c.CSIStorageCapacities() {
		if capacity.Capacity != nil {
			total.Add(*capacity.Capacity)
			found = true
		}
	}
	return total, found
}
