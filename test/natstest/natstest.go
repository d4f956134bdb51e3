// Package natstest runs a private NATS server with JetStream for a test —
// stoppable and restartable on the same port and store, to simulate an
// outage — with DCM's status stream and a collector of the CloudEvents that
// reach it. It must never be imported by production code.
package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dcm-project/storage-gateway/test/ports"
)

// Server is one test's NATS server.
type Server struct {
	URL  string
	t    testing.TB
	opts *natsserver.Options
	mu   sync.Mutex
	srv  *natsserver.Server
}

// Start runs a server until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	port := ports.Free(t)
	s := &Server{
		URL: fmt.Sprintf("nats://127.0.0.1:%d", port), t: t,
		opts: &natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true},
	}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the server down (clients see an outage).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// Restart starts the server again on the same port and store.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, err := natsserver.NewServer(s.opts)
	if err != nil {
		s.t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		s.t.Fatal("NATS server not ready")
	}
	s.srv = srv
}

// Event is a received CloudEvent, as DCM's consumer reads it.
type Event struct {
	MsgID         string
	ID            string `json:"id"`
	Source        string `json:"source"`
	Type          string `json:"type"`
	Subject       string `json:"subject"`
	ContentType   string `json:"datacontenttype"`
	Time          string `json:"time"`
	EnvironmentID string `json:"environmentid"`
	Data          struct {
		ID      string `json:"id"`
		Status  string `json:"status"`
		Message string `json:"message"`
		// VolumeID and RestoreSize are a snapshot event's.
		VolumeID    string `json:"volume_id"`
		RestoreSize string `json:"restore_size"`
		// Requested and Current are a tier event's.
		Requested string `json:"requested"`
		Current   string `json:"current"`
		// OutputSpec is what a bound volume provisioned.
		OutputSpec *struct {
			VolumeName string `json:"volume_name"`
		} `json:"output_spec"`
	} `json:"data"`
}

// Stream is DCM's status stream and everything stored in it — or, as From
// returns it, the part one publisher wrote.
type Stream struct {
	t      testing.TB
	stream jetstream.Stream
	only   func(Event) bool
}

// From is the part of the stream published for environment id (the
// gateway's events carry it); "" is the part without one — the events of a
// per-cluster provider such as DCM's storage SP.
func (st *Stream) From(environmentID string) *Stream {
	return &Stream{t: st.t, stream: st.stream, only: func(e Event) bool { return e.EnvironmentID == environmentID }}
}

// DCMStream creates the stream DCM configures: dcm-status on dcm.*.
func (s *Server) DCMStream() *Stream {
	s.t.Helper()
	return s.Stream("dcm-status", "dcm.*")
}

// JetStream is a JetStream client of the server until the test ends.
func (s *Server) JetStream() jetstream.JetStream {
	s.t.Helper()
	nc, err := nats.Connect(s.URL)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	return js
}

// Stream creates a file-backed stream of subjects.
func (s *Server) Stream(name string, subjects ...string) *Stream {
	s.t.Helper()
	stream, err := s.JetStream().CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage})
	if err != nil {
		s.t.Fatal(err)
	}
	return &Stream{t: s.t, stream: stream}
}

// Events returns every message in the stream, in stream order. It reads
// through the server's current state, so call it while the server runs.
func (st *Stream) Events() []Event {
	st.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.stream.Info(ctx)
	if err != nil {
		st.t.Fatal(err)
	}
	var out []Event
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		msg, err := st.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted or expired
		}
		if err != nil {
			st.t.Fatalf("read message %d: %v", seq, err)
		}
		var e Event
		if err := json.Unmarshal(msg.Data, &e); err != nil {
			st.t.Fatalf("message %d is not a CloudEvent: %v", seq, err)
		}
		e.MsgID = msg.Header.Get(jetstream.MsgIDHeader)
		if st.only == nil || st.only(e) {
			out = append(out, e)
		}
	}
	return out
}

// For returns the statuses reported for one volume (or snapshot), in
// order.
func For(events []Event, volumeID string) []string {
	var statuses []string
	for _, e := range events {
		if e.Data.ID == volumeID {
			statuses = append(statuses, e.Data.Status)
		}
	}
	return statuses
}
