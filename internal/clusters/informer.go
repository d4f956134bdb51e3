package clusters

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
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

// informer lists and watches one kind of object into an indexer and hands
// every change to one handler, on the goroutine that applies it: client-go's
// controller and DeltaFIFO, without the shared informer's processor, whose
// goroutines per informer and per handler a thousand environments multiply
// (BenchmarkIdleFleet counts them).
type informer struct {
	name    string
	indexer cache.Indexer
	ctrl    cache.Controller
}

// informerOptions describe one informer.
type informerOptions struct {
	name     string
	lw       cache.ListerWatcher
	example  runtime.Object
	indexers cache.Indexers
	handler  cache.ResourceEventHandler
	// onError hears every failed list or watch (the reflector retries).
	onError cache.WatchErrorHandlerWithContext
}

func newInformer(o informerOptions) *informer {
	indexer := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, o.indexers)
	fifo := cache.NewDeltaFIFOWithOptions(cache.DeltaFIFOOptions{
		KnownObjects: indexer, EmitDeltaTypeReplaced: true, Transformer: stripUnused,
	})
	ctrl := cache.New(&cache.Config{
		Queue:                        fifo,
		ListerWatcher:                o.lw,
		ObjectType:                   o.example,
		ObjectDescription:            o.name,
		MinWatchTimeout:              minWatchTimeout,
		WatchErrorHandlerWithContext: o.onError,
		Process: func(obj any, isInInitialList bool) error {
			deltas, ok := obj.(cache.Deltas)
			if !ok {
				return errors.New("cluster cache: the queue gave something other than deltas")
			}
			return apply(indexer, o.handler, deltas, isInInitialList)
		},
	})
	return &informer{name: o.name, indexer: indexer, ctrl: ctrl}
}

// apply brings the indexer up to date with deltas, telling handler of each
// change as it does.
func apply(indexer cache.Indexer, handler cache.ResourceEventHandler, deltas cache.Deltas, isInInitialList bool) error {
	for _, d := range deltas {
		switch d.Type {
		case cache.Deleted:
			if err := indexer.Delete(d.Object); err != nil {
				return err
			}
			handler.OnDelete(d.Object)
		default: // Sync, Replaced, Added, Updated
			old, exists, err := indexer.Get(d.Object)
			if err != nil {
				return err
			}
			if exists {
				if err := indexer.Update(d.Object); err != nil {
					return err
				}
				handler.OnUpdate(old, d.Object)
				continue
			}
			if err := indexer.Add(d.Object); err != nil {
				return err
			}
			handler.OnAdd(d.Object, isInInitialList)
		}
	}
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
// the namespace has a Pending claim: a warning is part of a Pending claim's
// status (the reason it is stuck, status.Of) and of nothing else, so an
// environment whose claims are all bound — an idle fleet — spends no watch,
// no goroutines and no memory on events. A claim that turns Pending starts
// the watch, whose list brings every warning still kept (an hour, by
// default); the last one to leave Pending stops it. It hears of every claim
// before anyone else (first in the namespace's fanout).
type warnings struct {
	newInformer func() *informer

	mu sync.Mutex
	// ctx and group are the caches' run context and goroutines, once they
	// started.
	ctx     context.Context
	group   *sync.WaitGroup
	pending map[string]bool // names of the claims Pending now
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
	if pvc.Status.Phase == corev1.ClaimPending {
		w.pending[pvc.Name] = true
	} else {
		delete(w.pending, pvc.Name)
	}
	w.follow()
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
		w.group.Go(func() { inf.ctrl.RunWithContext(ctx) })
	case len(w.pending) == 0 && w.running != nil:
		w.stop()
		w.running, w.stop = nil, nil
	}
}

// of returns the warnings of the claim with key namespace/name (none while
// no claim is Pending).
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
	if w.running == nil || w.running.ctrl.HasSynced() {
		return "", false
	}
	return w.running.name, true
}
