package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/snapshots"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

// BenchmarkSnapshotReady measures a snapshot from the request to READY:
// through the gateway, from the POST to its READY CloudEvent on NATS; and,
// as the baseline in the same run, a client-go create of the same
// VolumeSnapshot watched to readyToUse. Both are cut by the harness's CSI
// plugin behind the real snapshot controller and csi-snapshotter, from one
// volume, alternating which goes first. Reports each side's p50 and p99 in
// ms and the gateway's as a ratio of the baseline's.
//
//	go test ./test/e2e -run '^$' -bench SnapshotReady -benchtime 20x
func BenchmarkSnapshotReady(b *testing.B) {
	natsServer := natstest.Start(b)
	natsServer.Stream("snapshots", snapshots.EventSubject)
	g := gatewaytest.Start(b, gatewaytest.Options{NATSURL: natsServer.URL})
	c := client{t: b, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	c.register(east)
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace
	vol := c.runningVolume(envID, "snapshots")
	direct := adminSnapshots(b, east).SnapshotV1().VolumeSnapshots(ns)

	ready := make(chan string, 16) // ids of the snapshots reported READY
	arrived := make(chan time.Time, 16)
	nc, err := nats.Connect(natsServer.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	if _, err := nc.Subscribe(snapshots.EventSubject, func(m *nats.Msg) {
		at := time.Now()
		var e natstest.Event
		if json.Unmarshal(m.Data, &e) == nil && e.Data.Status == "READY" {
			ready <- e.Data.ID
			arrived <- at
		}
	}); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}

	throughGateway := func() time.Duration {
		id := uuid.NewString()
		start := time.Now()
		code, body := c.do(http.MethodPost, snapshotsPath(envID, vol)+"?id="+id, map[string]any{"snapshot_class": "snapshots"})
		c.want(http.StatusCreated, code, body)
		for {
			select {
			case got := <-ready:
				at := <-arrived
				if got == id {
					code, body = c.do(http.MethodDelete, snapshotsPath(envID, vol)+"/"+id, nil)
					c.want(http.StatusNoContent, code, body)
					return at.Sub(start)
				}
			case <-time.After(time.Minute):
				b.Fatalf("snapshot %s: no READY event within a minute", id)
			}
		}
	}
	withClientGo := func() time.Duration {
		name := "direct-" + uuid.NewString()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		w, err := direct.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		start := time.Now()
		if _, err := direct.Create(ctx, &snapshotv1.VolumeSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &vol},
				VolumeSnapshotClassName: ptr.To("snapshots")},
		}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for e := range w.ResultChan() {
			if vs, ok := e.Object.(*snapshotv1.VolumeSnapshot); ok && vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false) {
				at := time.Now()
				if err := direct.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
					b.Fatal(err)
				}
				return at.Sub(start)
			}
		}
		b.Fatalf("VolumeSnapshot %s: not ready within a minute", name)
		return 0
	}

	var gateway, baseline []time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			gateway = append(gateway, throughGateway())
			baseline = append(baseline, withClientGo())
		} else {
			baseline = append(baseline, withClientGo())
			gateway = append(gateway, throughGateway())
		}
	}
	b.StopTimer()
	g50, g99 := percentiles(gateway)
	d50, d99 := percentiles(baseline)
	b.ReportMetric(float64(g50.Microseconds())/1000, "gateway-p50-ms")
	b.ReportMetric(float64(g99.Microseconds())/1000, "gateway-p99-ms")
	b.ReportMetric(float64(d50.Microseconds())/1000, "direct-p50-ms")
	b.ReportMetric(float64(d99.Microseconds())/1000, "direct-p99-ms")
	b.ReportMetric(float64(g50)/float64(d50), "p50-gateway/direct")
	b.ReportMetric(float64(g99)/float64(d99), "p99-gateway/direct")
}
