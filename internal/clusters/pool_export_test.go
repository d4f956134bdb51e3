package clusters

import "time"

// Done is closed once every goroutine the cluster started has exited.
func (c *Cluster) Done() <-chan struct{} { return c.done }

// DetectionBound is the longest a dead cluster stays READY under o.
func DetectionBound(o PoolOptions) time.Duration { return detectionBound(o.withDefaults()) }

// WatchingWarnings reports whether the namespace's Warning events are
// watched now.
func (c *Cluster) WatchingWarnings(namespace string) bool {
	w := c.caches.byNamespace[namespace].warnings
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running != nil
}

// OpenConnections is how many connections the cluster's watches and
// health checks hold open.
func (c *Cluster) OpenConnections() int {
	c.conns.mu.Lock()
	defer c.conns.mu.Unlock()
	return len(c.conns.open)
}

// SetHealthWorkers sets how many workers run p's steady health checks; it
// must be called before p's first Ensure.
func SetHealthWorkers(p *Pool, n int) { p.checks.workers = n }
