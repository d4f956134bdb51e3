package environments

import (
	"context"

	"time"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// healthWriteTimeout bounds recording one health change.
const healthWriteTimeout = 10 * time.Second

// ensure hands an environment's connection to the cluster pool, which
// swaps a live client when the settings changed (identical ones: no-op).
func (s *Service) ensure(ctx context.Context, id string, spec Spec, conn kubeconfig.Connection) {
	if s.pool == nil {
		return
	}
	if err := s.pool.Ensure(clusters.Target{EnvironmentID: id, Connection: conn, Namespaces: spec.Namespaces()}); err != nil {
		s.log.ErrorContext(ctx, "connect environment", "environment", id, "error", err)
	}
}

// connect is ensure after a registration or update, and returns the
// environment as stored now: one deleted meanwhile (its Remove may have run
// first) is disconnected again and not found.
func (s *Service) connect(ctx context.Context, id string, spec Spec, conn kubeconfig.Connection) (Environment, error) {
	s.ensure(ctx, id, spec, conn)
	env, err := s.Get(ctx, id)
	if s.pool != nil && fault.Is(err, fault.NotFound) {
		s.pool.Remove(id)
	}
	return env, err
}

// disconnectAllBut removes pool entries of environments not in registered.
func (s *Service) disconnectAllBut(registered map[string]bool) {
	if s.pool == nil {
		return
	}
	for _, id := range s.pool.IDs() {
		if !registered[id] {
			s.pool.Remove(id)
		}
	}
}

// RecordHealth stores what the pool learns about reachability between
// probes. It only moves an environment to UNREACHABLE, or back from it (or
// from PENDING) to READY: a reachable cluster may still lack permissions,
// which only the probe can tell.
func (s *Service) RecordHealth(id string, h clusters.Health) {
	if h.State != clusters.StateReady && h.State != clusters.StateUnreachable {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthWriteTimeout)
	defer cancel()
	changed, err := s.repo.recordReachability(ctx, id, h.State, h.Message, now())
	if err != nil {
		s.log.ErrorContext(ctx, "record environment health", "environment", id, "error", err)
		return
	}
	if changed {
		s.log.InfoContext(ctx, "environment state changed", "environment", id, "to", h.State, "message", h.Message)
	}
}
