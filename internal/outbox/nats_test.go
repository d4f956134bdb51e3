package outbox_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dcm-project/storage-gateway/internal/outbox"
)

var discard = slog.New(slog.DiscardHandler)

// systemNATS is the machine's NATS server (JetStream on), as in CI.
const systemNATS = "nats://127.0.0.1:4222"

func connect(t *testing.T, opts outbox.NATSOptions) *outbox.NATS {
	t.Helper()
	n, err := outbox.ConnectNATS(opts, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// publishToStream creates a stream on subject and publishes one message with
// a JetStream ack, proving JetStream works on the connection.
func publishToStream(t *testing.T, conn *nats.Conn, stream, subject string) {
	t.Helper()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(t.Context(), jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), subject, []byte("hello"), jetstream.WithMsgID("m-1"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != stream {
		t.Fatalf("ack from stream %q, want %q", ack.Stream, stream)
	}
}

func TestEmbeddedInProcessHasJetStreamAndNoListener(t *testing.T) {
	n := connect(t, outbox.NATSOptions{EmbeddedStoreDir: t.TempDir()})
	if err := n.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	if addr := n.EmbeddedAddr(); addr != "" {
		t.Fatalf("in-process embedded server listens on %s", addr)
	}
	publishToStream(t, n.Conn, "TEST", "test.inproc")
}

func TestEmbeddedListenerServesOtherClientsBesideSystemNATS(t *testing.T) {
	// The system NATS owns 4222; the embedded server must coexist with it.
	if c, err := net.DialTimeout("tcp", "127.0.0.1:4222", time.Second); err == nil {
		_ = c.Close()
	} else {
		t.Fatalf("system NATS on 4222 is not running: %v", err)
	}
	n := connect(t, outbox.NATSOptions{EmbeddedStoreDir: t.TempDir(), EmbeddedListen: "127.0.0.1:0"})
	addr := n.EmbeddedAddr()
	if addr == "" || strings.HasSuffix(addr, ":4222") {
		t.Fatalf("embedded server address %q", addr)
	}
	other, err := nats.Connect("nats://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	sub, err := other.SubscribeSync("dcm.storage")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := n.Conn.Publish("dcm.storage", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("client on the embedded listener did not get the gateway's message: %v", err)
	}
}

func TestEmbeddedListenAddressInUseFailsClearly(t *testing.T) {
	_, err := outbox.ConnectNATS(outbox.NATSOptions{EmbeddedStoreDir: t.TempDir(), EmbeddedListen: "127.0.0.1:4222"}, discard)
	if err == nil || !strings.Contains(err.Error(), "listen address") {
		t.Fatalf("embedded server on the system NATS port: err=%v, want a listen-address error", err)
	}
}

func TestEmbeddedJetStreamStoreSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	first, err := outbox.ConnectNATS(outbox.NATSOptions{EmbeddedStoreDir: dir}, discard)
	if err != nil {
		t.Fatal(err)
	}
	publishToStream(t, first.Conn, "DURABLE", "durable.x")
	first.Close(t.Context())

	second := connect(t, outbox.NATSOptions{EmbeddedStoreDir: dir})
	js, err := jetstream.New(second.Conn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "DURABLE")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages after restart, want 1", info.State.Msgs)
	}
}

func TestExternalServer(t *testing.T) {
	n := connect(t, outbox.NATSOptions{URL: systemNATS})
	if err := n.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n.EmbeddedAddr() != "" {
		t.Fatal("external mode started an embedded server")
	}
	js, err := jetstream.New(n.Conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), "SG_EVENTS_TEST") })
	publishToStream(t, n.Conn, "SG_EVENTS_TEST", "sgtest.external")
}

func TestUnreachableExternalServerIsNotReadyButNotFatal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now

	n := connect(t, outbox.NATSOptions{URL: "nats://" + addr})
	if err := n.Check(t.Context()); err == nil {
		t.Fatal("Check passed with no server")
	}
}
