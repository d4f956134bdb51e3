package clusters

import (
	"context"
	"errors"
	"sync"
	"time"

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
// goroutines per informer and per handler a thousand environments × five
// caches multiply (BenchmarkIdleFleet counts them).
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

// notify is a handler that calls changed after every change.
func notify(changed func()) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}
}

// ignore is a handler for caches only read.
var ignore cache.ResourceEventHandler = cache.ResourceEventHandlerFuncs{}

// runInformers runs every informer until ctx ends; wait returns once all
// have stopped.
func runInformers(ctx context.Context, informers []*informer) (wait func()) {
	var wg sync.WaitGroup
	for _, inf := range informers {
		wg.Go(func() { inf.ctrl.RunWithContext(ctx) })
	}
	return wg.Wait
}
