package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/internal/postgres"
)

// The CloudEvent contract DCM's consumer expects (deploy/README.md, Status
// events).
const (
	EventType    = "dcm.status.storage"
	EventSubject = outbox.Subject
	// EnvironmentExtension names the environment of the volume.
	EnvironmentExtension = "environmentid"
)

// eventIDSpace makes event ids deterministic: the same volume transition
// always gets the same id, so JetStream deduplicates a retried publish.
var eventIDSpace = uuid.MustParse("6f1f2c8e-7a55-4b8e-9a43-7d4b1f0c2e91")

// Observation is one volume's status as last seen.
type Observation struct {
	EnvironmentID string
	VolumeID      string
	Status        Status
	Message       string
	// VolumeName is the PersistentVolume the claim is bound to, if known
	// (recorded with the status; an empty one keeps the recorded name).
	VolumeName string
}

// Recorder writes status transitions: the volume record and, when the
// status differs from the last one reported, its CloudEvent in the outbox —
// in one transaction, so neither exists without the other. It is the one
// writer of volume status; the gateway builds one. Only the environment's
// owner writes, and only while its claim holds: the first statement checks
// the claim and locks it until the commit (see membership.FenceSQL), so a
// replica that lost the environment — stalled past its lease, say —
// records nothing and queues no event.
type Recorder struct {
	// Outbox runs the transactions (and wakes the relay after them).
	Outbox *outbox.Writer
	// Leases tells the lease this replica holds on each environment, for
	// the recordings that start a use case (RecordObserved, Repeat).
	Leases membership.Leases
}

// eventData is the CloudEvent's data. OutputSpec names what the volume
// provisioned once it is bound: DCM's control plane stores it with the
// instance (its status consumer reads data.output_spec); DCM's
// service-provider-manager ignores it.
type eventData struct {
	ID         string      `json:"id"`
	Status     Status      `json:"status"`
	Message    string      `json:"message"`
	OutputSpec *outputSpec `json:"output_spec,omitempty"`
}

// outputSpec is what a volume provisioned: the PersistentVolume bound to
// its claim.
type outputSpec struct {
	VolumeName string `json:"volume_name"`
}

// ErrGone says an observation was refused because its volume is gone: it
// has no record (not created through the gateway, or forgotten), or its
// DELETED is recorded already.
var ErrGone = errors.New("the volume is gone")

// Record stores o, and its event if it is a transition, under lease — the
// one the caller's use case took where it started. A volume that is gone is
// ignored.
func (r Recorder) Record(ctx context.Context, lease membership.Lease, o Observation) error {
	return ignoreGone(r.Outbox.Tx(ctx, func(tx outbox.Tx) error {
		_, err := r.record(ctx, tx, lease, o, false, false)
		return err
	}))
}

// ignoreGone is err, except that a volume that is gone is no error.
func ignoreGone(err error) error {
	if errors.Is(err, ErrGone) {
		return nil
	}
	return err
}

// RecordObserved is Record for what the cluster shows (the tracker), under
// the lease held now: it says ErrGone when the volume is gone, so the
// tracker forgets it. A record that has no claim yet is gone too: the claim
// of its name is not its own until a create or adoption stores its uid (a
// create in flight holds what the follower sees until then), so a record an
// interrupted create left beside another provider's claim never reports
// that claim's status.
func (r Recorder) RecordObserved(ctx context.Context, o Observation) error {
	lease, err := r.Leases.Lease(o.EnvironmentID)
	if err != nil {
		return err
	}
	// What the claim shows is observed again after a crash.
	return r.Outbox.DerivedTx(ctx, func(tx outbox.Tx) error {
		_, err := r.record(ctx, tx, lease, o, false, true)
		return err
	})
}

// RecordFirstTx records o in the caller's transaction, only if nothing was
// reported for the volume yet: an adoption reports each volume's first
// status itself, in the transaction that records the volume (a create does
// the same in one statement, RecordCreated), but never over a newer one the
// status follower already recorded. queued says an event was queued (the
// relay hears of it when tx commits).
func (r Recorder) RecordFirstTx(ctx context.Context, tx outbox.Tx, lease membership.Lease, o Observation) (queued bool, err error) {
	queued, err = r.record(ctx, tx, lease, o, true, false)
	return queued, ignoreGone(err)
}

// Created is what a create records once its claim exists: the claim's uid
// and the volume's first status as the claim shows it.
type Created struct {
	Observation
	ClaimUID string
	// Provider is the environment's DCM provider name and CreateTime the
	// record's: what the event is built from.
	Provider   string
	CreateTime time.Time
}

// RecordCreated stores the uid of the claim a create made and, unless a
// status was reported for the volume already (the follower's, from an
// earlier attempt), c as its first status with its event — all in one
// statement, fenced by lease, committed with the other writes of the
// moment (outbox.Writer.Statement): the path every create takes. live
// says the volume was neither being deleted nor deleted meanwhile (nothing
// is recorded then); queued says its first status was recorded and its
// event queued.
func (r Recorder) RecordCreated(ctx context.Context, lease membership.Lease, c Created) (live, queued bool, err error) {
	event, eventID, err := r.event(c.Observation, c.Provider, c.CreateTime, 1)
	if err != nil {
		return false, false, err
	}
	var held bool
	var queuedID *int64
	err = r.Outbox.Statement(ctx, func(b postgres.Batch, ids *[]int64) {
		// The row is locked first (FOR UPDATE), so the status it read
		// decides the update; a status reported already is kept.
		b.Queue(func(row pgx.Row) error {
			queuedID = nil
			if err := row.Scan(&held, &live, &queuedID); err != nil || queuedID == nil {
				return err
			}
			*ids = append(*ids, *queuedID)
			return nil
		}, `
			WITH fence AS (SELECT `+membership.FenceSQL("$1::text", "$9", "$10")+` AS held),
			old AS (
				SELECT reported_status = '' AND transitions = 0 AS first FROM volumes
				WHERE environment_id = $1 AND id = $2 AND status NOT IN ('DELETING', 'DELETED') AND (SELECT held FROM fence)
				FOR UPDATE),
			claimed AS (
				UPDATE volumes v SET pvc_uid = $3, update_time = now(),
					status = CASE WHEN old.first THEN $4 ELSE v.status END,
					status_message = CASE WHEN old.first THEN $5 ELSE v.status_message END,
					reported_status = CASE WHEN old.first THEN $4 ELSE v.reported_status END,
					reported_message = CASE WHEN old.first THEN $5 ELSE v.reported_message END,
					transitions = CASE WHEN old.first THEN 1 ELSE v.transitions END,
					volume_name = CASE WHEN old.first AND $6 <> '' THEN $6 ELSE v.volume_name END
				FROM old WHERE v.environment_id = $1 AND v.id = $2
				RETURNING old.first),
			queued AS (`+outbox.InsertSQL+`
				SELECT $7, $1, $2, $4, $8, $9 FROM claimed WHERE first RETURNING id)
			SELECT (SELECT held FROM fence), EXISTS (SELECT 1 FROM claimed), (SELECT id FROM queued)`,
			c.EnvironmentID, c.VolumeID, c.ClaimUID, string(c.Status), c.Message, c.VolumeName, eventID, event,
			lease.Epoch, lease.Incarnation)
	})
	if err == nil && !held {
		err = lease.Lost()
	}
	return live, queuedID != nil, err
}

// record is Record's transaction; observed says o is what the cluster shows
// (see RecordObserved).
func (r Recorder) record(ctx context.Context, tx outbox.Tx, lease membership.Lease, o Observation, firstOnly, observed bool) (bool, error) {
	last, err := r.reported(ctx, tx, o.EnvironmentID, o.VolumeID, lease)
	switch {
	case err != nil:
		return false, err
	case last.Status == Deleted, observed && !last.claimed:
		return false, ErrGone
	case firstOnly && last.Status != "", !allowed(last.Status, o.Status):
		return false, nil
	}
	if !reportable(last.Observation, o) {
		_, err := tx.Exec(ctx, `UPDATE volumes SET status = $3, status_message = $4,
				volume_name = CASE WHEN $5 <> '' THEN $5 ELSE volume_name END
			WHERE environment_id = $1 AND id = $2 AND (status_message <> $4 OR $5 <> '' AND volume_name <> $5)`,
			o.EnvironmentID, o.VolumeID, string(o.Status), o.Message, o.VolumeName)
		return false, err
	}
	return true, r.queue(ctx, tx, o, last, lease.Epoch)
}

// reportedState is what a volume last reported, and what its next event
// is built from.
type reportedState struct {
	Observation
	provider    string
	transitions int64
	created     time.Time
	// claimed says the record has its claim's uid.
	claimed bool
}

// reported reads, and locks until the commit, the volume's last reported
// status, under the fence: ErrGone without a record, claim.Lost() when
// this replica's claim no longer holds.
func (r Recorder) reported(ctx context.Context, tx pgx.Tx, environmentID, volumeID string, lease membership.Lease) (reportedState, error) {
	last := reportedState{Observation: Observation{EnvironmentID: environmentID, VolumeID: volumeID}}
	var owner bool
	err := tx.QueryRow(ctx, `
		SELECT v.reported_status, v.reported_message, v.transitions, v.create_time, COALESCE(e.dcm->>'provider_name', ''),
			COALESCE(v.pvc_uid, '') <> '', `+membership.FenceSQL("v.environment_id", "$3", "$4")+`
		FROM volumes v LEFT JOIN environments e ON e.id = v.environment_id
		WHERE v.environment_id = $1 AND v.id = $2
		FOR UPDATE OF v`, environmentID, volumeID, lease.Epoch, lease.Incarnation).
		Scan(&last.Status, &last.Message, &last.transitions, &last.created, &last.provider, &last.claimed, &owner)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return last, ErrGone
	case err != nil:
		return last, err
	case !owner:
		return last, lease.Lost()
	}
	return last, nil
}

// queue records o as the volume's reported status, the transition after
// last, and puts its event in the outbox.
func (r Recorder) queue(ctx context.Context, tx outbox.Tx, o Observation, last reportedState, epoch int64) error {
	transition := last.transitions + 1
	event, eventID, err := r.event(o, last.provider, last.created, transition)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE volumes SET status = $3, status_message = $4, reported_status = $3,
			reported_message = $4, transitions = $5, update_time = now(),
			volume_name = CASE WHEN $6 <> '' THEN $6 ELSE volume_name END
		WHERE environment_id = $1 AND id = $2`,
		o.EnvironmentID, o.VolumeID, string(o.Status), o.Message, transition, o.VolumeName); err != nil {
		return err
	}
	return outbox.InsertTx(ctx, tx, outbox.Event{ID: eventID, EnvironmentID: o.EnvironmentID, VolumeID: o.VolumeID,
		Status: string(o.Status), Data: event, Epoch: epoch})
}

// Repeat queues the volume's reported status again, as a new event, unless
// heard — what DCM's record says — is that status already. DCM's manager
// drops an event for an instance it has not stored yet, and it stores an
// instance only after the create was answered: a volume that became
// RUNNING in between would stay PROVISIONING in DCM for good. It reports
// whether an event was queued; a volume that is gone or DELETED queues
// nothing.
func (r Recorder) Repeat(ctx context.Context, environmentID, volumeID string, heard Status) (bool, error) {
	lease, err := r.Leases.Lease(environmentID)
	if err != nil {
		return false, err
	}
	queued := false
	err = r.Outbox.Tx(ctx, func(tx outbox.Tx) error {
		last, err := r.reported(ctx, tx, environmentID, volumeID, lease)
		switch {
		case errors.Is(err, ErrGone):
			return nil
		case err != nil:
			return err
		case last.Status == heard || last.Status == Deleted || last.Status == "":
			return nil
		}
		queued = true
		return r.queue(ctx, tx, last.Observation, last, lease.Epoch)
	})
	return queued && err == nil, err
}

// allowed refuses transitions out of the end of a volume's life: nothing
// follows DELETED, and DELETING (a deletion the gateway asked for or saw)
// only ends in DELETED — a stale observation never revives a volume.
func allowed(from, to Status) bool {
	switch from {
	case Deleted:
		return false
	case Deleting:
		return to == Deleting || to == Deleted
	}
	return true
}

// reportable decides what DCM hears: every status change, and, while a
// volume is PROVISIONING, a new provisioning warning — the reason it is
// stuck. Other message changes (expansion progress, resyncs) only update
// the record.
func reportable(last, now Observation) bool {
	if last.Status != now.Status {
		return true
	}
	return now.Status == Provisioning && now.Message != last.Message && strings.HasPrefix(now.Message, warningPrefix)
}

// event builds the structured-mode CloudEvent for one transition.
// The event id is seeded with the record's creation time too: a volume id
// reused after its record was forgotten starts a new sequence of ids.
func (r Recorder) event(o Observation, provider string, created time.Time, transition int64) ([]byte, string, error) {
	id := uuid.NewSHA1(eventIDSpace, fmt.Appendf(nil, "%s/%s/%d/%d/%s", o.EnvironmentID, o.VolumeID, created.UnixMicro(), transition, o.Status)).String()
	data := eventData{ID: o.VolumeID, Status: o.Status, Message: o.Message}
	if o.VolumeName != "" && o.Status != Deleted {
		data.OutputSpec = &outputSpec{VolumeName: o.VolumeName}
	}
	event, err := NewEvent(id, provider, o.EnvironmentID, EventType, EventSubject, data)
	return event, id, err
}

// NewEvent builds one of the gateway's structured-mode CloudEvents — the
// volume status events DCM reads, and the snapshot and tier events beside
// them: source dcm/providers/PROVIDER (the environment's default provider
// name when empty), the environment extension, data as JSON.
func NewEvent(id, provider, environmentID, eventType, subject string, data any) ([]byte, error) {
	if provider == "" {
		provider = environments.DefaultProviderName(environmentID)
	}
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource("dcm/providers/" + provider)
	e.SetType(eventType)
	e.SetSubject(subject)
	e.SetTime(time.Now().UTC())
	e.SetExtension(EnvironmentExtension, environmentID)
	if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
		return nil, err
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}
