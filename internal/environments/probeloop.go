package environments

import (
	"context"
	"sync"
	"time"
)

// probeConcurrency bounds how many clusters one round probes at once, so a
// fleet of slow clusters cannot exhaust connections.
const probeConcurrency = 4

// RunProbes runs a probe round at once and then once per interval until ctx
// ends, so status reflects clusters that died or recovered while the gateway
// was down or between admin actions, and the cluster pool follows the
// registry (several replicas pick up each other's changes).
func (s *Service) RunProbes(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.ProbeAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ProbeAll is one round: every registered environment is probed (and handed
// to the cluster pool with the credentials the probe opened), the results
// recorded, and pool entries of environments no longer registered removed.
// Failures are logged per environment; one never stops the others.
func (s *Service) ProbeAll(ctx context.Context) {
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	registered := map[string]bool{}
	err := s.repo.each(ctx, func(rec record) error {
		registered[rec.ID] = true
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.probeAndRecord(ctx, rec); err != nil && ctx.Err() == nil {
				s.log.ErrorContext(ctx, "probe environment", "environment", rec.ID, "error", err)
			}
		})
		return nil
	})
	wg.Wait()
	if err != nil {
		if ctx.Err() == nil {
			s.log.ErrorContext(ctx, "list environments to probe", "error", err)
		}
		return // a partial list must not disconnect the rest
	}
	s.disconnectAllBut(registered)
}
