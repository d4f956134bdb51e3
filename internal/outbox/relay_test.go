package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/internal/status"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// queue records transitions through the status recorder, as the gateway
// does, for volumes created here; it returns them, and the recorder (of a
// replica that owns the environment).
func queue(t *testing.T, reg *registrytest.Fixture, volumes, transitions int) (map[string][]string, status.Recorder) {
	t.Helper()
	ctx := context.Background()
	reg.InsertEnvironment(t, "env")
	owner := reg.Member(t, "replica-1")
	registrytest.Own(t, owner, "env")
	rec := status.Recorder{Outbox: outbox.NewWriter(outbox.WriterOptions{DB: reg.DB}), Leases: owner}
	lease, err := owner.Lease("env")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	cycle := []status.Status{status.Provisioning, status.Running}
	for v := range volumes {
		id := fmt.Sprintf("vol-%d", v)
		reg.InsertVolume(t, "env", id)
		for i := range transitions {
			st := cycle[i%2]
			if err := rec.Record(ctx, lease, status.Observation{EnvironmentID: "env", VolumeID: id, Status: st, Message: string(st)}); err != nil {
				t.Fatal(err)
			}
			want[id] = append(want[id], string(st))
		}
	}
	return want, rec
}

// newRelay connects to the NATS server at url until the test ends and
// returns a relay on that connection with opts (DB set by the caller; a
// registry of its own and a silent logger unless set).
func newRelay(t *testing.T, url string, opts outbox.RelayOptions) (*outbox.Relay, *nats.Conn) {
	t.Helper()
	nc, err := outbox.ConnectNATS(outbox.NATSOptions{URL: url}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(context.Background()) })
	opts.Conn = nc.Conn
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	relay, err := outbox.NewRelay(opts)
	if err != nil {
		t.Fatal(err)
	}
	return relay, nc.Conn
}

// Three relays draining one outbox side by side publish every event once
// and each volume's events in order.
func TestRelaysInSeveralReplicasKeepOrder(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	natsServer := natstest.Start(t)
	stream := natsServer.DCMStream()
	want, _ := queue(t, reg, 20, 6)

	var wg sync.WaitGroup
	registries := make([]*prometheus.Registry, 3)
	relays := make([]*outbox.Relay, 3)
	for i := range 3 {
		registries[i] = prometheus.NewRegistry()
		relay, _ := newRelay(t, natsServer.URL, outbox.RelayOptions{DB: reg.DB, Metrics: registries[i]})
		relays[i] = relay
		wg.Go(func() {
			if err := relay.Drain(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	got := stream.Events()
	if len(got) != 20*6 {
		t.Fatalf("%d events on the stream, want %d", len(got), 20*6)
	}
	for id, statuses := range want {
		if have := natstest.For(got, id); !slices.Equal(have, statuses) {
			t.Fatalf("%s: published %v, want %v", id, have, statuses)
		}
	}
	var unsent int
	if err := reg.DB.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE sent_time IS NULL`).Scan(&unsent); err != nil || unsent != 0 {
		t.Fatalf("%d events left unsent (%v)", unsent, err)
	}
	// The metrics add up: every event counted once by status; a relay's next
	// pass sees nothing waiting.
	published := 0.0
	for _, r := range registries {
		for _, st := range []string{"PROVISIONING", "RUNNING"} {
			published += metric(t, r, "storage_gateway_outbox_published_total", st)
		}
	}
	if err := relays[0].Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if depth := metric(t, registries[0], "storage_gateway_outbox_depth", ""); depth != 0 {
		t.Fatalf("outbox depth %v after draining", depth)
	}
	if published != 20*6 {
		t.Fatalf("published_total adds up to %v, want %d", published, 20*6)
	}
}

// metric sums the values of a counter or gauge family, restricted to
// status=st when st is set.
func metric(t *testing.T, r *prometheus.Registry, name, st string) float64 {
	t.Helper()
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if st != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "status" && l.GetValue() == st }) {
				continue
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

// Without a stream for the subject the relay falls back to a core publish
// (with the message id header) and still marks the events sent.
func TestRelayWithoutAStreamPublishesPlainly(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	natsServer := natstest.Start(t)
	_, _ = queue(t, reg, 1, 2)
	relay, conn := newRelay(t, natsServer.URL, outbox.RelayOptions{DB: reg.DB})
	sub, err := conn.SubscribeSync(outbox.Subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		msg, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Header.Get("Nats-Msg-Id") == "" {
			t.Fatal("core publish without the message id")
		}
	}
	var unsent int
	if err := reg.DB.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE sent_time IS NULL`).Scan(&unsent); err != nil || unsent != 0 {
		t.Fatalf("%d events left unsent (%v)", unsent, err)
	}
}

// One batch of events on two subjects: each goes to its own subject,
// through JetStream where a stream covers it (DCM's) and plainly where
// none does, and every row is marked sent.
func TestRelayPublishesEachEventToItsSubject(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	natsServer := natstest.Start(t)
	dcm := natsServer.DCMStream()
	want, _ := queue(t, reg, 1, 2)
	const other = "dcm.storage.other"
	w := outbox.NewWriter(outbox.WriterOptions{DB: reg.DB})
	if err := w.Tx(context.Background(), func(tx outbox.Tx) error {
		return outbox.InsertTx(context.Background(), tx, outbox.Event{ID: "other-1", EnvironmentID: "env", VolumeID: outbox.OrderKey("snapshot", "vol-0"),
			Subject: other, Status: "READY", Data: []byte(`{"id":"vol-0","status":"READY"}`)})
	}); err != nil {
		t.Fatal(err)
	}
	relay, conn := newRelay(t, natsServer.URL, outbox.RelayOptions{DB: reg.DB})
	sub, err := conn.SubscribeSync(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get("Nats-Msg-Id") != "other-1" {
		t.Fatalf("the event on %s came as %q", other, msg.Header.Get("Nats-Msg-Id"))
	}
	// DCM's stream has the volume's events, and the snapshot key's event
	// (with the same id in its data) is not among them.
	if got := natstest.For(dcm.Events(), "vol-0"); !slices.Equal(got, want["vol-0"]) {
		t.Fatalf("DCM's stream holds %v for vol-0, want %v", got, want["vol-0"])
	}
	var unsent int
	if err := reg.DB.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE sent_time IS NULL`).Scan(&unsent); err != nil || unsent != 0 {
		t.Fatalf("%d events left unsent (%v)", unsent, err)
	}
}

// Sent events older than the retention are pruned; unsent ones and recent
// ones stay, and a volume's next event still gets a new id (the outbox is
// not what numbers transitions).
func TestRelayPrunesSentEventsPastTheRetention(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	natsServer := natstest.Start(t)
	natsServer.DCMStream()
	_, rec := queue(t, reg, 3, 2)
	relay, _ := newRelay(t, natsServer.URL, outbox.RelayOptions{DB: reg.DB, Retention: time.Hour})
	ctx := context.Background()
	if err := relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	// Two volumes' events were sent two hours ago, one volume's just now;
	// one more event waits unsent.
	if _, err := reg.DB.Exec(ctx, `UPDATE outbox SET sent_time = now() - interval '2 hours' WHERE volume_id IN ('vol-0', 'vol-1')`); err != nil {
		t.Fatal(err)
	}
	lease, err := rec.Leases.Lease("env")
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Record(ctx, lease, status.Observation{EnvironmentID: "env", VolumeID: "vol-0", Status: status.Failed, Message: "x"}); err != nil {
		t.Fatal(err)
	}
	n, err := relay.Prune(ctx)
	if err != nil || n != 4 {
		t.Fatalf("pruned %d (%v), want the 4 old sent events", n, err)
	}
	left := pgtest.Column[string](t, reg.DB, `SELECT volume_id || ':' || status || ':' || (sent_time IS NOT NULL)::text FROM outbox ORDER BY id`)
	if want := []string{"vol-2:PROVISIONING:true", "vol-2:RUNNING:true", "vol-0:FAILED:false"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}

// TestRunningRelaysPublishWhatTheirWritersNamedAndScanForTheRest: relays
// running in three replicas, each woken by its own writer with the ids it
// queued, publish every event once and each volume's events in order,
// though a volume's transitions are queued through all three writers in
// turn (a noticed event behind an unsent one of its volume waits for a
// scan). An event queued with no relay woken (another replica's, say) is
// still published within seconds while the writers keep the relays busy.
func TestRunningRelaysPublishWhatTheirWritersNamedAndScanForTheRest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	reg := registrytest.New(t, registrytest.Options{})
	natsServer := natstest.Start(t)
	stream := natsServer.DCMStream()
	reg.InsertEnvironment(t, "env")
	owner := reg.Member(t, "replica-1")
	registrytest.Own(t, owner, "env")
	lease, err := owner.Lease("env")
	if err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	recorders := make([]status.Recorder, 3)
	for i := range recorders {
		relay, _ := newRelay(t, natsServer.URL, outbox.RelayOptions{DB: reg.DB})
		wg.Go(func() { relay.Run(ctx) })
		recorders[i] = status.Recorder{Outbox: outbox.NewWriter(outbox.WriterOptions{DB: reg.DB, Wake: relay.Notify}), Leases: owner}
	}
	// Let the relays' first scans pass: from here on, only the writers'
	// notices or a periodic scan publish.
	time.Sleep(100 * time.Millisecond)

	const volumes, transitions = 20, 6
	want := map[string][]string{}
	cycle := []status.Status{status.Provisioning, status.Running}
	for v := range volumes {
		id := fmt.Sprintf("vol-%d", v)
		reg.InsertVolume(t, "env", id)
	}
	for i := range transitions {
		for v := range volumes {
			id, st := fmt.Sprintf("vol-%d", v), cycle[i%2]
			rec := recorders[(v+i)%len(recorders)]
			if err := rec.Record(ctx, lease, status.Observation{EnvironmentID: "env", VolumeID: id, Status: st, Message: string(st)}); err != nil {
				t.Fatal(err)
			}
			want[id] = append(want[id], string(st))
		}
		if i == transitions/2 {
			reg.InsertVolume(t, "env", "unnoticed")
			silent := status.Recorder{Outbox: outbox.NewWriter(outbox.WriterOptions{DB: reg.DB}), Leases: owner}
			if err := silent.Record(ctx, lease, status.Observation{EnvironmentID: "env", VolumeID: "unnoticed", Status: status.Running}); err != nil {
				t.Fatal(err)
			}
			want["unnoticed"] = []string{string(status.Running)}
		}
	}

	// Keep every relay busy with wake-ups (a volume flipping through the
	// three writers) until the unnoticed event is out.
	reg.InsertVolume(t, "env", "busy")
	var busy []string
	out := func(events []natstest.Event) bool { return len(natstest.For(events, "unnoticed")) > 0 }
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !out(stream.Events()); {
		for range 10 {
			st := cycle[len(busy)%2]
			rec := recorders[len(busy)%len(recorders)]
			if err := rec.Record(ctx, lease, status.Observation{EnvironmentID: "env", VolumeID: "busy", Status: st, Message: string(st)}); err != nil {
				t.Fatal(err)
			}
			busy = append(busy, string(st))
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !out(stream.Events()) {
		t.Fatal("the event no relay was woken for was not published in 5 s of wake-ups")
	}
	want["busy"] = busy
	events := poll.Value(t, 10*time.Second, func() ([]natstest.Event, bool) {
		got := stream.Events()
		return got, len(got) >= volumes*transitions+1+len(busy)
	})
	for id, statuses := range want {
		if have := natstest.For(events, id); !slices.Equal(have, statuses) {
			t.Fatalf("%s: published %v, want %v", id, have, statuses)
		}
	}
	if len(events) != volumes*transitions+1+len(busy) {
		t.Fatalf("%d events on the stream, want %d", len(events), volumes*transitions+1+len(busy))
	}
	if unsent := pgtest.Column[int64](t, reg.DB, `SELECT count(*) FROM outbox WHERE sent_time IS NULL`); unsent[0] != 0 {
		t.Fatalf("%d events left unsent", unsent[0])
	}
}

// TestAVolumesNextEventDoesNotWaitForTheLoadToEnd: two events of one
// volume queued in one transaction reach the relay together, and only the
// first can be claimed; the second goes out right after it, while other
// writers keep waking the relay, not once they stop. An event queued with
// no relay woken goes out within the scan interval under the same load.
func TestAVolumesNextEventDoesNotWaitForTheLoadToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	reg := registrytest.New(t, registrytest.Options{})
	natsServer := natstest.Start(t)
	stream := natsServer.DCMStream()
	reg.InsertEnvironment(t, "env")
	relay, _ := newRelay(t, natsServer.URL, outbox.RelayOptions{DB: reg.DB})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { relay.Run(ctx) })
	w := outbox.NewWriter(outbox.WriterOptions{DB: reg.DB, Wake: relay.Notify})
	event := func(id, volume, st string) outbox.Event {
		return outbox.Event{ID: id, EnvironmentID: "env", VolumeID: volume, Status: st,
			Data: fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"source":"t","type":"t","data":{"id":%q,"status":%q}}`, id, volume, st), Epoch: 1}
	}
	queue := func(events ...outbox.Event) {
		t.Helper()
		if err := w.Tx(ctx, func(tx outbox.Tx) error {
			for _, e := range events {
				if err := outbox.InsertTx(ctx, tx, e); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // past the relay's first scan

	silent := outbox.NewWriter(outbox.WriterOptions{DB: reg.DB})
	if err := silent.Tx(ctx, func(tx outbox.Tx) error { return outbox.InsertTx(ctx, tx, event("quiet-1", "quiet", "RUNNING")) }); err != nil {
		t.Fatal(err)
	}
	queue(event("pair-1", "pair", "PROVISIONING"), event("pair-2", "pair", "RUNNING"))
	start := time.Now()
	// Writers enough that a notice is always waiting when the relay looks.
	busy, stopBusy := context.WithCancel(ctx)
	var writers sync.WaitGroup
	for g := range 8 {
		writers.Go(func() {
			for i := 0; busy.Err() == nil; i++ {
				id := fmt.Sprintf("busy-%d-%d", g, i)
				if err := w.Tx(busy, func(tx outbox.Tx) error { return outbox.InsertTx(busy, tx, event(id, id, "RUNNING")) }); err != nil && busy.Err() == nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// Sent is marked once the stream acknowledged the event.
	sent := func(eventID string) bool {
		var done bool
		if err := reg.DB.QueryRow(ctx, `SELECT sent_time IS NOT NULL FROM outbox WHERE event_id = $1`, eventID).Scan(&done); err != nil {
			t.Fatal(err)
		}
		return done
	}
	var pairTook, quietTook time.Duration
	for time.Since(start) < 5*time.Second && (pairTook == 0 || quietTook == 0) {
		time.Sleep(10 * time.Millisecond)
		if pairTook == 0 && sent("pair-2") {
			pairTook = time.Since(start)
		}
		if quietTook == 0 && sent("quiet-1") {
			quietTook = time.Since(start)
		}
	}
	stopBusy()
	writers.Wait()
	events := stream.Events()
	if got := natstest.For(events, "pair"); !slices.Equal(got, []string{"PROVISIONING", "RUNNING"}) {
		t.Fatalf("pair published %v; want [PROVISIONING RUNNING]", got)
	}
	if got := natstest.For(events, "quiet"); len(got) != 1 {
		t.Fatalf("the unnoticed event published %d times; want once", len(got))
	}
	t.Logf("under load: the volume's second event out after %s, the unnoticed one after %s", pairTook, quietTook)
	// By id right after its first: well before a scan would find it.
	if pairTook == 0 || pairTook > 600*time.Millisecond {
		t.Fatalf("the volume's second event went out after %s of other events (0: not while they came); want within 600 ms", pairTook)
	}
	if quietTook == 0 || quietTook > 2500*time.Millisecond {
		t.Fatalf("the unnoticed event went out after %s of other events (0: not while they came); want within the 1 s scan interval and a batch", quietTook)
	}
}
