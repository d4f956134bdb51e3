package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/status"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// TestTheStatusFlushOutlastsASlowWorkerUnderItsLeases: a status the tracker
// still holds at shutdown (a flap it was coalescing) is recorded by the
// final flush although a worker took longer to stop than a lease lasts:
// the membership heartbeat goes on until the flush is done, so the flush
// writes under leases that still hold.
func TestTheStatusFlushOutlastsASlowWorkerUnderItsLeases(t *testing.T) {
	const lease = 2 * time.Second // held by this replica's clock for 1.8 s after a heartbeat
	f := newScrapeFixture(t, fleetShape{Environments: 1, Classes: 1, Volumes: 1},
		map[string]string{"SG_MEMBER_LEASE": lease.String(), "SG_STATUS_DEBOUNCE": "1h"})
	g := f.gateway
	const env, volume = "env-00000", "env-00000-vol-0"
	// The volume's claim is its own (what a create records).
	if _, err := f.db.Exec(t.Context(), `UPDATE volumes SET pvc_uid = 'uid-1' WHERE id = $1`, volume); err != nil {
		t.Fatal(err)
	}
	// A worker that takes longer to stop than a lease lasts.
	g.background = append(g.background, &worker{name: "slow to stop", run: func(ctx context.Context) {
		<-ctx.Done()
		timer := time.NewTimer(lease + time.Second)
		defer timer.Stop()
		<-timer.C
	}})
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	stopped := make(chan struct{})
	go func() { defer close(stopped); runErr = g.Run(ctx) }()
	defer func() {
		cancel()
		<-stopped
	}()
	poll.Until(t, 10*time.Second, "this replica owns "+env, func() bool { return g.membership.Owns(env) })

	// Two changes spend the volume's flap budget; the third waits for a
	// token (an hour) and is only written by the final flush.
	for _, st := range []status.Status{status.Provisioning, status.Running, status.Failed} {
		g.tracker.Observe(status.Observation{EnvironmentID: env, VolumeID: volume, Status: st, Message: string(st)})
	}
	reported := func() []string {
		return pgtest.Column[string](t, f.db, `SELECT status FROM outbox WHERE volume_id = $1 ORDER BY id`, volume)
	}
	poll.Until(t, 10*time.Second, "the first two changes recorded", func() bool { return len(reported()) == 2 })
	cancel()
	<-stopped
	if runErr != nil {
		t.Fatalf("Run: %v", runErr)
	}
	if got := reported(); len(got) != 3 || got[2] != string(status.Failed) {
		t.Fatalf("after a shutdown with a worker slower than the lease, the outbox holds %v; want the held FAILED flushed last", got)
	}
}
