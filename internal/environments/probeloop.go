package environments

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// probeConcurrency bounds how many clusters one round probes at once, so a
// fleet of slow clusters cannot exhaust connections.
const probeConcurrency = 4

// RunProbes runs a probe round at once and then an interval after each round
// ends, until ctx ends, so status reflects clusters that died, recovered or lost
// permissions while the gateway was down or between admin actions. Probes
// only check and record; the Connector decides what the pool connects to.
func (s *Service) RunProbes(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, s.ProbeAll, interval)
}

// ProbeAll is one round: every registered environment is probed and the
// results recorded. Failures are logged per environment; one never stops the
// others.
func (s *Service) ProbeAll(ctx context.Context) {
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	err := s.repo.each(ctx, func(rec record) error {
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
	if err != nil && ctx.Err() == nil {
		s.log.ErrorContext(ctx, "list environments to probe", "error", err)
	}
}
