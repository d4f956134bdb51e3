package membership

import "context"

// Beat runs one heartbeat and rebalance, as Run does every tenth of the lease.
func (m *Membership) Beat(ctx context.Context) error { return m.beat(ctx) }

// ID is the member's id.
func (m *Membership) ID() string { return m.opts.ID }
