package dcm

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dcm-project/storage-gateway/internal/controller"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

// noOwners own no environment: every one asked about is gone.
type noOwners struct{}

func (noOwners) Owner(_ context.Context, env string) (membership.Peer, error) {
	return membership.Peer{}, fault.New(fault.NotFound, "environment %q not found", env)
}
func (noOwners) Incarnation() uuid.UUID { return uuid.Nil }

// oneInstallation is the volume use cases as far as the dispatch of
// requests reads them: the installation's identity.
type oneInstallation struct{ AgentVolumes }

func (oneInstallation) Installation(context.Context) (string, error) { return "inst", nil }

// delivered is a request delivered for the NumDelivered-th time; what was
// done with it is recorded.
type delivered struct {
	jetstream.Msg
	subject string
	data    []byte
	count   uint64

	mu   sync.Mutex
	done []string
}

func (d *delivered) Subject() string { return d.subject }
func (d *delivered) Data() []byte    { return d.data }
func (d *delivered) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: d.count, Sequence: jetstream.SequencePair{Stream: 7}}, nil
}
func (d *delivered) NakWithDelay(delay time.Duration) error { return d.record("nak " + delay.String()) }
func (d *delivered) Term() error                            { return d.record("term") }
func (d *delivered) record(what string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = append(d.done, what)
	return nil
}

// A request for an environment no replica serves waits to be delivered
// again, in case its owner is being handed over; on its last delivery it
// is answered MAX_DELIVERY_EXCEEDED, from the agent's default name, and
// ended (or it would stay in DCM's work queue unanswered).
func TestARequestNoReplicaServesIsAnsweredOnItsLastDelivery(t *testing.T) {
	srv := natstest.Start(t)
	js := srv.JetStream()
	responses, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "dcm-agent-responses", Subjects: []string{responseSubject}})
	if err != nil {
		t.Fatal(err)
	}
	a := &Agents{opts: AgentOptions{JetStream: js, Owners: noOwners{}, Volumes: oneInstallation{}},
		log: slog.New(slog.DiscardHandler), fetches: controller.New(controller.Options{Name: "fetches"})}
	root := topicPrefix + installationPrefix + "inst"
	request := []byte(`{"id":"r1","type":"dcm.request.create","data":{"resource_id":"vol-1","service_type":"storage","spec":{}}}`)
	for _, tc := range []struct {
		count   uint64
		done    string
		answers uint64
	}{{1, "nak 5s", 0}, {maxDeliver - 1, "nak 5s", 0}, {maxDeliver, "term", 1}} {
		msg := &delivered{subject: root + ".gone", data: request, count: tc.count}
		h, handed := a.dispatch(t.Context(), root, msg)
		if !handed {
			t.Fatalf("delivery %d: not to be handed to the owner", tc.count)
		}
		a.handOver(t.Context(), h)
		info, err := responses.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.done) != 1 || msg.done[0] != tc.done || info.State.Msgs != tc.answers {
			t.Fatalf("delivery %d: %v, %d answers; want %s, %d", tc.count, msg.done, info.State.Msgs, tc.done, tc.answers)
		}
	}
	answer, err := responses.GetMsg(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(answer.Data, &e); err != nil {
		t.Fatal(err)
	}
	if e.Type != typeError || e.Data["error"] != errMaxDelivery || e.Data["resource_id"] != "vol-1" ||
		e.Data["agent_name"] != "storage-gateway-gone" || e.Data["topic_name"] != root+".gone" {
		t.Fatalf("answered %s %v", e.Type, e.Data)
	}
}
