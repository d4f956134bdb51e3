package changes

import (
	"context"
	"sync"

	"k8s.io/client-go/util/workqueue"
)

// Topic delivers each published notice to every current subscription.
// The zero value is ready to use.
type Topic[T comparable] struct {
	mu   sync.Mutex
	subs map[*Subscription[T]]struct{}
}

// Publish queues v for every subscription; it never blocks on a subscriber.
func (t *Topic[T]) Publish(v T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for s := range t.subs {
		s.queue.Add(v)
	}
}

// Subscribe returns a subscription that receives every notice published
// from now on. Subscribe when the subscriber is built, before the publisher
// starts, so no notice falls between them; Run delivers them.
func (t *Topic[T]) Subscribe() *Subscription[T] {
	s := &Subscription[T]{topic: t, queue: workqueue.NewTyped[T]()}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subs == nil {
		t.subs = map[*Subscription[T]]struct{}{}
	}
	t.subs[s] = struct{}{}
	return s
}

func (t *Topic[T]) unsubscribe(s *Subscription[T]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.subs, s)
}

// Subscription is one subscriber's queue of notices.
type Subscription[T comparable] struct {
	topic *Topic[T]
	queue workqueue.TypedInterface[T]
}

// Run calls handle for each notice, one at a time and in the order they
// were first queued, until ctx ends; then it unsubscribes and returns. A
// notice published while an equal one waits is merged with it; one
// published while handle runs for an equal notice is delivered again after.
// Run may be called once.
func (s *Subscription[T]) Run(ctx context.Context, handle func(context.Context, T)) {
	defer s.topic.unsubscribe(s)
	stop := context.AfterFunc(ctx, s.queue.ShutDown)
	defer stop()
	defer s.queue.ShutDown()
	for {
		v, shutdown := s.queue.Get()
		if shutdown || ctx.Err() != nil {
			return
		}
		handle(ctx, v)
		s.queue.Done(v)
	}
}
