package environments

import (
	"context"
	"errors"
	"time"

	"github.com/dcm-project/storage-gateway/internal/controller"
	"github.com/dcm-project/storage-gateway/internal/membership"
)

// ProbeOptions configure the probe reconciler.
type ProbeOptions struct {
	// Owned are the environments this replica probes: each is probed by
	// its owner alone.
	Owned membership.Ownership
	// Interval is the time between probes of an environment that is not
	// READY; ReadyInterval between probes of a READY one.
	Interval, ReadyInterval time.Duration
	// Workers probe different environments at once (SG_PROBE_CONCURRENCY;
	// the prober's own cap applies across everything it probes).
	Workers int
}

// Probes is the probe reconciler, so status reflects clusters that died,
// recovered or lost permissions while the gateway was down or between admin
// actions. Each environment this replica owns is looked at when the
// reconciler starts, when it is registered or updated and when this
// replica gains it, then again when its next probe is due: an interval
// after its last probe while it is not READY, readyInterval after while it
// is. Its pool connection shows reachability all the time (RecordHealth),
// and a request of it refused with 401 or 403 has it probed at once (the
// Connector calls Probe) — so an idle fleet's permissions cost its
// clusters a few requests every readyInterval. Probes only check and
// record; the Connector decides what the pool connects to.
func (s *Service) Probes(opts ProbeOptions) *controller.Controller {
	c := controller.New(controller.Options{
		Name: "probes", Workers: opts.Workers, Owns: opts.Owned.Owns, Logger: s.log,
		List: s.IDs,
		Reconcile: func(ctx context.Context, id string) (time.Duration, error) {
			return s.reconcileProbe(ctx, opts, id)
		},
	})
	controller.Watch(c, s.Subscribe(), func(ch Change) []string { return []string{ch.EnvironmentID} })
	controller.Watch(c, opts.Owned.Subscribe(), func(ch membership.Change) []string { return []string{ch.EnvironmentID} })
	return c
}

// reconcileProbe probes environment id if it is due, and says when it is
// due next.
func (s *Service) reconcileProbe(ctx context.Context, opts ProbeOptions, id string) (time.Duration, error) {
	lease, err := opts.Owned.Lease(id)
	if err != nil {
		return 0, nil // another replica's, or handed over this instant
	}
	// Most looks find the environment not due: they read only what says
	// so, not the credentials and counts of the whole row.
	st, err := s.repo.probeStatus(ctx, id)
	switch {
	case errors.Is(err, errNotFound):
		return 0, nil // deleted
	case err != nil:
		return 0, err
	}
	if dueForProbe(st, opts.ReadyInterval, now()) {
		rec, err := s.repo.get(ctx, id)
		switch {
		case errors.Is(err, errNotFound):
			return 0, nil
		case err != nil:
			return 0, err
		}
		if st, err = s.probeAndRecordStatus(ctx, rec, &lease); err != nil {
			return 0, err
		}
	}
	return untilDue(st, opts.Interval, opts.ReadyInterval, now()), nil
}

// dueForProbe reports whether an environment in state st is due for a
// probe at.
func dueForProbe(st Status, readyInterval time.Duration, at time.Time) bool {
	return st.State != StateReady || st.LastProbeTime == nil || at.Sub(*st.LastProbeTime) >= readyInterval
}

// untilDue is how long after at an environment in state st is due for its
// next probe.
func untilDue(st Status, interval, readyInterval time.Duration, at time.Time) time.Duration {
	if st.State != StateReady || st.LastProbeTime == nil {
		return interval
	}
	return max(st.LastProbeTime.Add(readyInterval).Sub(at), time.Second)
}

// Probe probes one environment its owner holds claim on now and records
// the result, unless the claim is no longer current (an unknown
// environment is no error: it was deleted meanwhile).
func (s *Service) Probe(ctx context.Context, id string, lease membership.Lease) error {
	rec, err := s.repo.get(ctx, id)
	if errors.Is(err, errNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.probeAndRecord(ctx, rec, &lease)
}

// IDs lists every registered environment's id (the reconcilers' start-up
// listing: ids only, not the sealed credentials).
func (s *Service) IDs(ctx context.Context) ([]string, error) { return s.repo.ids(ctx) }
