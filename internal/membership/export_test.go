package membership

import (
	"context"
	"maps"
)

// Beat runs one heartbeat and rebalance, as Run does every tenth of the lease.
func (m *Membership) Beat(ctx context.Context) error { return m.beat(ctx) }

// ID is the member's id.
func (m *Membership) ID() string { return m.opts.ID }

// Owned returns the environments this member owns and the epoch of each
// claim.
func (m *Membership) Owned() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.owned)
}
