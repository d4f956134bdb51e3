package environments

import (
	"context"
	"sync"
	"time"
)

// probeConcurrency bounds how many clusters one round probes at once, so a
// fleet of slow clusters cannot exhaust connections.
const probeConcurrency = 4

// RunProbes probes every environment at once and then once per interval until
// ctx ends, so status reflects clusters that died or recovered while the
// gateway was down or between admin actions; each round also re-syncs the
// cluster pool with the registry.
func (s *Service) RunProbes(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.SyncPool(ctx); err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "sync the cluster pool with the registry", "error", err)
		}
		s.ProbeAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ProbeAll probes every registered environment and records the results.
// Failures are logged per environment; one never stops the others.
func (s *Service) ProbeAll(ctx context.Context) {
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	f := listFilter{limit: MaxPageSize}
	for {
		recs, err := s.repo.list(ctx, f)
		if err != nil {
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "list environments to probe", "error", err)
			}
			return
		}
		for _, rec := range recs {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := s.probeAndRecord(ctx, rec); err != nil && ctx.Err() == nil {
					s.log.ErrorContext(ctx, "probe environment", "environment", rec.ID, "error", err)
				}
			})
		}
		if len(recs) < f.limit {
			return
		}
		f.after = recs[len(recs)-1].ID
	}
}
