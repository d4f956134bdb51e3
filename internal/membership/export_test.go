package membership

import (
	"context"
	"maps"
	"time"
)

// Beat runs one heartbeat, as Run does every fifth of the lease.
func (m *Membership) Beat(ctx context.Context) error { return m.beat(ctx, false) }

// ID is the member's id.
func (m *Membership) ID() string { return m.opts.ID }

// Owned returns the environments this member owns and the epoch of each
// claim.
func (m *Membership) Owned() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.owned)
}

// Interval is the time between heartbeats.
func (m *Membership) Interval() time.Duration { return m.interval() }

// WokenGap is the least time between two heartbeats Rebalance asked for.
const WokenGap = wokenGap

// WokenBeat runs one heartbeat as Rebalance asks for it.
func (m *Membership) WokenBeat(ctx context.Context) error { return m.beat(ctx, true) }
