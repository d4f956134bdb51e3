package clusters

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// minWatchTimeout is the shortest watch an informer asks the API server
// for; client-go picks each watch's timeout between it and twice it.
// client-go's own default is 5 minutes, and a watch that ends is opened
// again: a request per cache every 7.5 minutes on average, most of an idle
// environment's cost to its cluster. Watches of 30–60 minutes cost a sixth
// of that and are no less live: the API server sends a bookmark on every
// watch about once a minute, and a broken connection ends the watch (HTTP/2
// pings find a silent one within 45 s).
const minWatchTimeout = 30 * time.Minute

// Reflector retries: client-go's own (unexported) defaults — a failed LIST
// or WATCH is retried after 0.8 s doubling to 30 s, each with up to as much
// again of jitter, and the backoff starts over after two quiet minutes.
var reflectorBackoff = wait.Backoff{Duration: 800 * time.Millisecond, Cap: 30 * time.Second, Steps: 38, Factor: 2, Jitter: 1}

const reflectorBackoffReset = 2 * time.Minute

// informer lists and watches one kind of object into an indexer and hands
// every change to one handler: client-go's Reflector writing straight into
// a store that applies each change on the reflector's goroutine (applier),
// driven by the informer's own retry loop (run). client-go's controller
// would add a DeltaFIFO, its processing goroutine, a goroutine waiting to
// close it and one more for the reflector — six goroutines per informer
// where this runs four (the reflector, its resync timer, the watch's
// decoder and the HTTP/2 stream's writer), and a thousand environments
// multiply each (BenchmarkIdleFleet counts them). The shared informer's
// processor would cost more still.
type informer struct {
	name      string
	indexer   cache.Indexer
	store     *applier
	reflector *cache.Reflector
	onError   cache.WatchErrorHandlerWithContext
}

// informerOptions describe one informer.
type informerOptions struct {
	name     string
	lw       cache.ListerWatcher
	example  runtime.Object
	indexers cache.Indexers
	handler  cache.ResourceEventHandler
	// onError hears every failed list or watch (the informer retries).
	onError cache.WatchErrorHandlerWithContext
}

func newInformer(o informerOptions) *informer {
	indexer := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, o.indexers)
	store := &applier{indexer: indexer, handler: o.handler}
	return &informer{name: o.name, indexer: indexer, store: store, onError: o.onError,
		reflector: cache.NewReflectorWithOptions(o.lw, o.example, store, cache.ReflectorOptions{
			Name: o.name, TypeDescription: o.name, MinWatchTimeout: minWatchTimeout,
		})}
}

// run lists and watches until ctx ends, retrying with client-go's backoff;
// each failure goes to onError (the reflector's own loop would log it
// through klog, with the API server's words, at every retry).
func (i *informer) run(ctx context.Context) {
	delay := reflectorBackoff.DelayWithReset(clock.RealClock{}, reflectorBackoffReset)
	_ = delay.Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		if err := i.reflector.ListAndWatchWithContext(ctx); err != nil && ctx.Err() == nil {
			i.onError(ctx, i.reflector, err)
		}
		return false, nil
	})
}

// hasSynced reports whether the first list has been applied.
func (i *informer) hasSynced() bool { return i.store.synced.Load() }

// applier is the reflector's store: it brings the indexer up to date with
// each change and tells handler of it as it does, on the reflector's
// goroutine, with what a DeltaFIFO would have handed on: an object a relist
// no longer holds is deleted as a cache.DeletedFinalStateUnknown, one it
// still holds is an update, and objects of the first list are adds in the
// initial list.
type applier struct {
	indexer cache.Indexer
	handler cache.ResourceEventHandler
	synced  atomic.Bool
}

func (a *applier) Add(obj any) error    { return a.upsert(obj, false) }
func (a *applier) Update(obj any) error { return a.upsert(obj, false) }
func (a *applier) Resync() error        { return nil } // no resync period

func (a *applier) Delete(obj any) error {
	obj = stripUnused(obj)
	if err := a.indexer.Delete(obj); err != nil {
		return err
	}
	a.handler.OnDelete(obj)
	return nil
}

func (a *applier) Replace(list []any, _ string) error {
	initial := !a.synced.Load()
	keep := make(map[string]bool, len(list))
	for i, obj := range list {
		list[i] = stripUnused(obj)
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(list[i])
		if err != nil {
			return err
		}
		keep[key] = true
	}
	for _, old := range a.indexer.List() {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(old)
		if err != nil || keep[key] {
			continue
		}
		if err := a.indexer.Delete(old); err != nil {
			return err
		}
		a.handler.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
	}
	for _, obj := range list {
		if err := a.upsert(obj, initial); err != nil {
			return err
		}
	}
	a.synced.Store(true)
	return nil
}

func (a *applier) upsert(obj any, isInInitialList bool) error {
	obj = stripUnused(obj)
	old, exists, err := a.indexer.Get(obj)
	if err != nil {
		return err
	}
	if exists {
		if err := a.indexer.Update(obj); err != nil {
			return err
		}
		a.handler.OnUpdate(old, obj)
		return nil
	}
	if err := a.indexer.Add(obj); err != nil {
		return err
	}
	a.handler.OnAdd(obj, isInInitialList)
	return nil
}

// fanout hands one informer's changes to handlers added at any time; one
// added late first receives every cached object as an add. Handlers are
// called one at a time, in order, on the informer's goroutine.
type fanout struct {
	indexer cache.Indexer // set before the informer starts

	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
}

func (f *fanout) add(h cache.ResourceEventHandler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, obj := range f.indexer.List() {
		h.OnAdd(obj, false)
	}
	f.handlers = append(f.handlers, h)
}

func (f *fanout) OnAdd(obj any, isInInitialList bool) {
	f.each(func(h cache.ResourceEventHandler) { h.OnAdd(obj, isInInitialList) })
}

func (f *fanout) OnUpdate(old, obj any) {
	f.each(func(h cache.ResourceEventHandler) { h.OnUpdate(old, obj) })
}

func (f *fanout) OnDelete(obj any) { f.each(func(h cache.ResourceEventHandler) { h.OnDelete(obj) }) }

func (f *fanout) each(do func(cache.ResourceEventHandler)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.handlers {
		do(h)
	}
}

// ignore is a handler for caches only read.
var ignore cache.ResourceEventHandler = cache.ResourceEventHandlerFuncs{}

// warnings are one namespace's Warning events on PVCs, watched only while
// the namespace has a claim that needs them: a Pending claim (the reason it
// is stuck, status.Of) or one whose change of tier is not done (the reason
// the driver refused it). Nothing else reads them, so an environment whose
// claims are all bound and settled — an idle fleet — spends no watch, no
// goroutines and no memory on events. A claim that starts needing them
// starts the watch, whose list brings every warning still kept (an hour, by
// default); the last one to stop needing them stops it. It hears of every
// claim before anyone else (first in the namespace's fanout).
type warnings struct {
	newInformer func() *informer

	mu sync.Mutex
	// ctx and group are the caches' run context and goroutines, once they
	// started.
	ctx     context.Context
	group   *sync.WaitGroup
	pending map[string]bool // names of the claims that need warnings now
	running *informer
	stop    context.CancelFunc
}

func (w *warnings) OnAdd(obj any, _ bool) { w.saw(obj) }
func (w *warnings) OnUpdate(_, obj any)   { w.saw(obj) }
func (w *warnings) OnDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.pending, pvc.Name)
		w.follow()
	}
}

func (w *warnings) saw(obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if needsWarnings(pvc) {
		w.pending[pvc.Name] = true
	} else {
		delete(w.pending, pvc.Name)
	}
	w.follow()
}

// needsWarnings reports a claim whose status its warnings explain: Pending,
// or asking for a tier it is not on yet.
func needsWarnings(pvc *corev1.PersistentVolumeClaim) bool {
	requested := pvc.Spec.VolumeAttributesClassName
	return pvc.Status.Phase == corev1.ClaimPending ||
		requested != nil && *requested != "" && (pvc.Status.CurrentVolumeAttributesClassName == nil || *pvc.Status.CurrentVolumeAttributesClassName != *requested)
}

// start lets the watch run in group until ctx ends.
func (w *warnings) start(ctx context.Context, group *sync.WaitGroup) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctx, w.group = ctx, group
	w.follow()
}

// follow starts the watch while a claim is Pending and stops it when none
// is. w.mu is held. It is called from the claims' informer, whose own
// goroutine keeps group's count above zero, so adding to it is safe even
// while shutdown waits.
func (w *warnings) follow() {
	switch {
	case w.ctx == nil || w.ctx.Err() != nil:
	case len(w.pending) > 0 && w.running == nil:
		ctx, cancel := context.WithCancel(w.ctx)
		inf := w.newInformer()
		w.running, w.stop = inf, cancel
		w.group.Go(func() { inf.run(ctx) })
	case len(w.pending) == 0 && w.running != nil:
		w.stop()
		w.running, w.stop = nil, nil
	}
}

// of returns the warnings of the claim with key namespace/name (none while
// no claim needs them).
func (w *warnings) of(key string) []any {
	w.mu.Lock()
	running := w.running
	w.mu.Unlock()
	if running == nil {
		return nil
	}
	objs, _ := running.indexer.ByIndex(byInvolvedPVC, key) // the index exists
	return objs
}

// unsynced names the watch when it runs and has not synced yet.
func (w *warnings) unsynced() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running == nil || w.running.hasSynced() {
		return "", false
	}
	return w.running.name, true
}
