package environments

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/membership"
)

// probeConcurrency bounds how many clusters one round probes at once, so a
// fleet of slow clusters cannot exhaust connections.
const probeConcurrency = 4

// RunProbes runs a probe round at once and then an interval after each round
// ends, until ctx ends, so status reflects clusters that died, recovered or lost
// permissions while the gateway was down or between admin actions. A round
// probes the environments this replica owns (each is probed by its owner
// alone) that are not READY, and a READY one only once readyInterval has
// passed since its last probe: its pool connection shows reachability all
// the time (RecordHealth), and a request of it refused with 401 or 403 has
// it probed at once (the Connector calls Probe) — so an idle fleet's
// permissions cost its clusters a few requests every readyInterval, not
// every interval. Probes only check and record; the Connector decides what
// the pool connects to.
func (s *Service) RunProbes(ctx context.Context, owned membership.Ownership, interval, readyInterval time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		s.probeOwned(ctx, owned, func(rec record) bool { return dueForProbe(rec.Status, readyInterval, now()) })
	}, interval)
}

// dueForProbe reports whether a round probes an environment in state st.
func dueForProbe(st Status, readyInterval time.Duration, at time.Time) bool {
	return st.State != clusters.StateReady || st.LastProbeTime == nil || at.Sub(*st.LastProbeTime) >= readyInterval
}

// Probe probes one environment its owner holds claim on now and records
// the result, unless the claim is no longer current (an unknown
// environment is no error: it was deleted meanwhile).
func (s *Service) Probe(ctx context.Context, id string, claim membership.Claim) error {
	rec, err := s.repo.get(ctx, id)
	if errors.Is(err, errNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.probeAndRecord(ctx, rec, &claim)
}

// probeOwned probes the owned environments due says are due and records
// the results. Failures are logged per environment; one never stops the
// others.
func (s *Service) probeOwned(ctx context.Context, owned membership.Ownership, due func(record) bool) {
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	err := s.repo.each(ctx, func(rec record) error {
		if !owned.Owns(rec.ID) || !due(rec) {
			return nil // another replica's, or not due
		}
		claim, err := owned.Claim(rec.ID)
		if err != nil {
			return nil // handed over this instant
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.probeAndRecord(ctx, rec, &claim); err != nil && ctx.Err() == nil {
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
