package clusters

// Done is closed once every goroutine the cluster started has exited.
func (c *Cluster) Done() <-chan struct{} { return c.done }
