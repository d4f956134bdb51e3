package status

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// recorderFixture is a recorder over a fresh database holding environment
// "env", owned by this replica, with a record of one volume.
type recorderFixture struct {
	reg   *registrytest.Fixture
	owner *membership.Membership
	rec   Recorder
	lease membership.Lease // held when the fixture was made
}

func newRecorderFixture(t *testing.T, volumeID string) recorderFixture {
	t.Helper()
	reg := registrytest.New(t, registrytest.Options{})
	reg.InsertEnvironment(t, "env")
	reg.InsertVolume(t, "env", volumeID)
	owner := reg.Member(t, "replica-1")
	registrytest.Own(t, owner, "env")
	lease, err := owner.Lease("env")
	if err != nil {
		t.Fatal(err)
	}
	return recorderFixture{reg: reg, owner: owner, rec: Recorder{Outbox: outbox.NewWriter(outbox.WriterOptions{DB: reg.DB}), Leases: owner}, lease: lease}
}

// queued lists the statuses of volumeID's events in the outbox, in order.
func (f recorderFixture) queued(t *testing.T, volumeID string) []string {
	t.Helper()
	return pgtest.Column[string](t, f.reg.DB, `SELECT status FROM outbox WHERE volume_id = $1 ORDER BY id`, volumeID)
}

// Nothing follows DELETED in the database: a stale observation of a deleted
// volume (a sweep that raced the deletion, after the tracker forgot it) is
// not recorded.
func TestRecorderNeverRevivesADeletedVolume(t *testing.T) {
	f := newRecorderFixture(t, "gone")
	for _, st := range []Status{Running, Deleted, Running} {
		if err := f.rec.Record(t.Context(), f.lease, Observation{EnvironmentID: "env", VolumeID: "gone", Status: st, Message: string(st)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.queued(t, "gone"); !slices.Equal(got, []string{"RUNNING", "DELETED"}) {
		t.Fatalf("outbox %v, want [RUNNING DELETED]", got)
	}
}

// TestAUseCaseWritesUnderTheLeaseItStartedWith: a recording made with the
// lease a use case took when it started is refused once the environment
// was handed over and back (a later epoch), though this replica owns it
// again: every write of a use case is fenced by the one ownership it began
// under, never by a fresh lookup halfway.
func TestAUseCaseWritesUnderTheLeaseItStartedWith(t *testing.T) {
	f := newRecorderFixture(t, "v")
	started := f.lease
	// Handed over and back: the row names this replica at a later epoch,
	// and this replica learns it at its next heartbeat.
	if _, err := f.reg.DB.Exec(t.Context(), `UPDATE environment_owners SET epoch = epoch + 2 WHERE environment_id = 'env'`); err != nil {
		t.Fatal(err)
	}
	f.owner.Rebalance()
	now := poll.Value(t, 10*time.Second, func() (membership.Lease, bool) {
		l, err := f.owner.Lease("env")
		return l, err == nil && l.Epoch > started.Epoch
	})

	o := Observation{EnvironmentID: "env", VolumeID: "v", Status: Running, Message: "bound"}
	if err := f.rec.Record(t.Context(), started, o); !errors.Is(err, membership.ErrNotOwner) {
		t.Fatalf("a recording under the lease the use case started with (epoch %d, now %d): %v; want refused", started.Epoch, now.Epoch, err)
	}
	if got := f.queued(t, "v"); len(got) != 0 {
		t.Fatalf("events queued by a refused recording: %v", got)
	}
	if err := f.rec.Record(t.Context(), now, o); err != nil {
		t.Fatalf("a recording under the current lease: %v", err)
	}
}

// TestACreateRecordsItsClaimAndFirstStatusAtOnce: the one statement a
// create ends with stores the claim's uid and the first status with the
// event the recorder would queue for it (same id: a repeat is dropped
// downstream), keeps a status reported before (an earlier attempt's, seen
// by the follower) without queuing another, records nothing for a volume
// being deleted meanwhile, and nothing under a lease that no longer holds.
func TestACreateRecordsItsClaimAndFirstStatusAtOnce(t *testing.T) {
	f := newRecorderFixture(t, "v")
	ctx := t.Context()
	var created time.Time
	if err := f.reg.DB.QueryRow(ctx, `SELECT create_time FROM volumes WHERE id = 'v'`).Scan(&created); err != nil {
		t.Fatal(err)
	}
	c := Created{Observation: Observation{EnvironmentID: "env", VolumeID: "v", Status: Provisioning, Message: "waiting"},
		ClaimUID: "uid-1", Provider: "p", CreateTime: created}
	row := func(id string) (uid, st, reported string, transitions int64) {
		t.Helper()
		if err := f.reg.DB.QueryRow(ctx, `SELECT COALESCE(pvc_uid, ''), status, reported_status, transitions FROM volumes WHERE id = $1`, id).
			Scan(&uid, &st, &reported, &transitions); err != nil {
			t.Fatal(err)
		}
		return uid, st, reported, transitions
	}

	live, queued, err := f.rec.RecordCreated(ctx, f.lease, c)
	if err != nil || !live || !queued {
		t.Fatalf("first record: live %v, queued %v, %v", live, queued, err)
	}
	if uid, st, reported, n := row("v"); uid != "uid-1" || st != "PROVISIONING" || reported != "PROVISIONING" || n != 1 {
		t.Fatalf("record = %s %s %s %d; want uid-1 PROVISIONING PROVISIONING 1", uid, st, reported, n)
	}
	_, wantID, err := f.rec.event(c.Observation, "p", created, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ids := pgtest.Column[string](t, f.reg.DB, `SELECT event_id FROM outbox WHERE volume_id = 'v'`); !slices.Equal(ids, []string{wantID}) {
		t.Fatalf("outbox ids %v, want [%s] (the first transition's)", ids, wantID)
	}

	// Reported already: the uid is stored, the status and events kept.
	c.ClaimUID, c.Status = "uid-2", Running
	if live, queued, err := f.rec.RecordCreated(ctx, f.lease, c); err != nil || !live || queued {
		t.Fatalf("second record: live %v, queued %v, %v; want live, nothing queued", live, queued, err)
	}
	if uid, st, _, n := row("v"); uid != "uid-2" || st != "PROVISIONING" || n != 1 {
		t.Fatalf("record = %s %s %d; want uid-2 PROVISIONING 1", uid, st, n)
	}

	// Being deleted: nothing recorded.
	f.reg.InsertVolume(t, "env", "d")
	if _, err := f.reg.DB.Exec(ctx, `UPDATE volumes SET status = 'DELETING' WHERE id = 'd'`); err != nil {
		t.Fatal(err)
	}
	c.VolumeID, c.ClaimUID = "d", "uid-3"
	if live, queued, err := f.rec.RecordCreated(ctx, f.lease, c); err != nil || live || queued {
		t.Fatalf("deleting volume: live %v, queued %v, %v; want neither", live, queued, err)
	}
	if uid, st, _, _ := row("d"); uid != "" || st != "DELETING" {
		t.Fatalf("deleting volume's record = %q %s; want untouched", uid, st)
	}

	// Fenced off: nothing recorded.
	f.reg.InsertVolume(t, "env", "late")
	if _, err := f.reg.DB.Exec(ctx, `UPDATE environment_owners SET epoch = epoch + 1 WHERE environment_id = 'env'`); err != nil {
		t.Fatal(err)
	}
	c.VolumeID = "late"
	if _, _, err := f.rec.RecordCreated(ctx, f.lease, c); !errors.Is(err, membership.ErrNotOwner) {
		t.Fatalf("under a lost lease: %v; want refused", err)
	}
	if uid, _, reported, _ := row("late"); uid != "" || reported != "" || len(f.queued(t, "late")) != 0 {
		t.Fatalf("a refused record wrote: uid %q, reported %q", uid, reported)
	}
}
