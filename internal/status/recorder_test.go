package status

import (
	"errors"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// TestAUseCaseWritesUnderTheLeaseItStartedWith: a recording made with the
// lease a use case took when it started is refused once the environment
// was handed over and back (a later epoch), though this replica owns it
// again: every write of a use case is fenced by the one ownership it began
// under, never by a fresh lookup halfway.
func TestAUseCaseWritesUnderTheLeaseItStartedWith(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	reg.InsertEnvironment(t, "env")
	reg.InsertVolume(t, "env", "v")
	owner := reg.Member(t, "replica-1")
	registrytest.Own(t, owner, "env")
	rec := Recorder{Outbox: outbox.NewWriter(outbox.WriterOptions{DB: reg.DB}), Leases: owner}
	started, err := owner.Lease("env")
	if err != nil {
		t.Fatal(err)
	}
	// Handed over and back: the row names this replica at a later epoch,
	// and this replica learns it at its next heartbeat.
	if _, err := reg.DB.Exec(t.Context(), `UPDATE environment_owners SET epoch = epoch + 2 WHERE environment_id = 'env'`); err != nil {
		t.Fatal(err)
	}
	owner.Rebalance()
	now := poll.Value(t, 10*time.Second, func() (membership.Lease, bool) {
		l, err := owner.Lease("env")
		return l, err == nil && l.Epoch > started.Epoch
	})

	o := Observation{EnvironmentID: "env", VolumeID: "v", Status: Running, Message: "bound"}
	if err := rec.Record(t.Context(), started, o); !errors.Is(err, membership.ErrNotOwner) {
		t.Fatalf("a recording under the lease the use case started with (epoch %d, now %d): %v; want refused", started.Epoch, now.Epoch, err)
	}
	var events int
	if err := reg.DB.QueryRow(t.Context(), `SELECT count(*) FROM outbox`).Scan(&events); err != nil || events != 0 {
		t.Fatalf("%d events queued by a refused recording (%v)", events, err)
	}
	if err := rec.Record(t.Context(), now, o); err != nil {
		t.Fatalf("a recording under the current lease: %v", err)
	}
}
