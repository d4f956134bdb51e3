package snapshots

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// The CloudEvents of snapshots: on a subject of their own, apart from
// DCM's volume events (outbox.Subject, whose stream captures dcm.* — one
// token — and so not this subject), with the same source and environment
// extension.
const (
	EventType    = "dcm.status.storage.snapshot"
	EventSubject = "dcm.storage.snapshots"
)

// eventIDSpace makes event ids deterministic: a snapshot's transition
// always gets the same id, so JetStream drops a retried publish.
var eventIDSpace = uuid.MustParse("0d6a3c5e-93f1-4f0b-8e57-2c1a9b7e4d20")

// eventData is a snapshot event's data.
type eventData struct {
	ID          string `json:"id"`
	VolumeID    string `json:"volume_id"`
	Status      Status `json:"status"`
	Message     string `json:"message"`
	RestoreSize string `json:"restore_size,omitempty"`
}

// event is the outbox row of a snapshot's transition-th state change. The
// id is seeded with the record's creation time: an id reused after its
// record was forgotten starts a new sequence.
func event(rec record, o observation, provider string, created time.Time, transition, epoch int64) (outbox.Event, error) {
	id := uuid.NewSHA1(eventIDSpace, fmt.Appendf(nil, "%s/%s/%d/%d/%s", rec.EnvironmentID, rec.ID, created.UnixMicro(), transition, o.Status)).String()
	data, err := status.NewEvent(id, provider, rec.EnvironmentID, EventType, EventSubject,
		eventData{ID: rec.ID, VolumeID: rec.VolumeID, Status: o.Status, Message: o.Message, RestoreSize: o.RestoreSize})
	return outbox.Event{ID: id, EnvironmentID: rec.EnvironmentID, VolumeID: outbox.OrderKey("snapshot", rec.ID), Subject: EventSubject,
		Status: string(o.Status), Data: data, Epoch: epoch}, err
}
