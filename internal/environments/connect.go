package environments

import (
	"context"
	"errors"
	"time"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// healthWriteTimeout bounds recording one health change.
const healthWriteTimeout = 10 * time.Second

// connect hands an environment's current connection to the cluster pool,
// which swaps a live client when the settings changed. An environment
// deleted meanwhile (its Remove may have run first) is disconnected again.
func (s *Service) connect(ctx context.Context, id string, spec Spec, conn kubeconfig.Connection) {
	if s.pool == nil {
		return
	}
	if err := s.pool.Ensure(clusters.Target{EnvironmentID: id, Connection: conn, Namespaces: spec.Namespaces()}); err != nil {
		s.log.ErrorContext(ctx, "connect environment", "environment", id, "error", err)
	}
	if _, err := s.repo.get(ctx, id); errors.Is(err, errNotFound) {
		s.pool.Remove(id)
	}
}

// SyncPool makes the cluster pool match the registry: every environment
// connected with its stored credentials, nothing else. It runs at start and
// with every probe round, so replicas pick up registrations, rotations and
// deletions made through another replica. An environment whose credentials
// cannot be opened is logged and skipped.
func (s *Service) SyncPool(ctx context.Context) error {
	if s.pool == nil {
		return nil
	}
	registered := map[string]bool{}
	f := listFilter{limit: MaxPageSize}
	for {
		recs, err := s.repo.list(ctx, f)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			registered[rec.ID] = true
			conn, err := s.open(rec)
			if err != nil {
				s.log.ErrorContext(ctx, "environment not connected: stored credentials unusable", "environment", rec.ID, "error", err)
				continue
			}
			s.connect(ctx, rec.ID, rec.Spec, conn)
		}
		if len(recs) < f.limit {
			break
		}
		f.after = recs[len(recs)-1].ID
	}
	for _, id := range s.pool.IDs() {
		if !registered[id] {
			s.pool.Remove(id)
		}
	}
	return nil
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
