package changes

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

// TestPublishNeverWaitsForASubscriber: a subscriber stuck in its handler
// does not hold up Publish, other subscribers, or the notices queued behind
// it; equal notices waiting together are merged.
func TestPublishNeverWaitsForASubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var topic Topic[string]
		stuck, other := topic.Subscribe(), topic.Subscribe()
		release := make(chan struct{})
		var mu sync.Mutex
		var stuckGot, otherGot []string
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() {
			stuck.Run(ctx, func(_ context.Context, v string) {
				mu.Lock()
				stuckGot = append(stuckGot, v)
				mu.Unlock()
				if v == "a" {
					<-release
				}
			})
		})
		wg.Go(func() {
			other.Run(ctx, func(_ context.Context, v string) {
				mu.Lock()
				otherGot = append(otherGot, v)
				mu.Unlock()
			})
		})
		topic.Publish("a")
		synctest.Wait() // both handlers took "a"; stuck is blocked in it
		for _, v := range []string{"b", "c", "b", "c", "b"} {
			topic.Publish(v) // returns although stuck is blocked
		}
		synctest.Wait()
		mu.Lock()
		if want := []string{"a", "b", "c"}; !slices.Equal(otherGot, want) {
			t.Errorf("the free subscriber got %v, want %v (equal waiting notices merged)", otherGot, want)
		}
		if want := []string{"a"}; !slices.Equal(stuckGot, want) {
			t.Errorf("the stuck subscriber got %v while stuck, want %v", stuckGot, want)
		}
		mu.Unlock()
		close(release)
		synctest.Wait()
		mu.Lock()
		if want := []string{"a", "b", "c"}; !slices.Equal(stuckGot, want) {
			t.Errorf("the stuck subscriber got %v once released, want %v", stuckGot, want)
		}
		mu.Unlock()
		cancel()
		wg.Wait()
	})
}

// TestRunUnsubscribes: once Run returned, publishing no longer queues for
// that subscription; a notice published while its equal is being handled is
// delivered again afterwards.
func TestRunUnsubscribes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var topic Topic[int]
		sub := topic.Subscribe()
		inHandler, release := make(chan struct{}), make(chan struct{})
		got := 0
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			sub.Run(ctx, func(context.Context, int) {
				got++
				if got == 1 {
					close(inHandler)
					<-release
				}
			})
		}()
		topic.Publish(1)
		<-inHandler
		topic.Publish(1) // while 1 is handled: delivered again after
		close(release)
		synctest.Wait()
		if got != 2 {
			t.Fatalf("handled %d times, want 2", got)
		}
		cancel()
		<-done
		topic.mu.Lock()
		n := len(topic.subs)
		topic.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d subscriptions left after Run returned", n)
		}
		topic.Publish(1) // must not block or panic on the shut-down queue
	})
}
