package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// waitEvents polls the stream until volumeID's statuses are want.
func waitEvents(t *testing.T, stream *natstest.Stream, volumeID string, want []string, within time.Duration) []natstest.Event {
	t.Helper()
	var all []natstest.Event
	poll.Until(t, within, fmt.Sprintf("volume %s reported %v", volumeID, want), func() bool {
		all = stream.Events()
		return slices.Equal(natstest.For(all, volumeID), want)
	})
	return all
}

// waitReported waits until the gateway recorded status as a volume's
// reported transition (queued in the outbox).
func waitReported(t *testing.T, g *gatewaytest.Gateway, volumeID, status string) {
	t.Helper()
	client{t: t}.eventually(time.Minute, volumeID+" reported "+status, func() bool {
		var reported string
		err := g.DB.QueryRow(t.Context(), `SELECT reported_status FROM volumes WHERE id = $1`, volumeID).Scan(&reported)
		return err == nil && reported == status
	})
}

// reporting is a gateway that reports status to a private JetStream with
// DCM's stream, with the east cluster registered.
type reporting struct {
	client
	gateway *gatewaytest.Gateway
	nats    *natstest.Server
	stream  *natstest.Stream
}

func startReporting(t testing.TB, opts gatewaytest.Options) reporting {
	natsServer := natstest.Start(t)
	stream := natsServer.DCMStream()
	opts.NATSURL = natsServer.URL
	g := gatewaytest.Start(t, opts)
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	c.register(clusters[0])
	return reporting{client: c, gateway: g, nats: natsServer, stream: stream}
}

// TestStatusEventsFollowTheVolumeLifecycle: create -> bind -> expand ->
// delete reaches DCM's stream as PROVISIONING, RUNNING, PROVISIONING,
// RUNNING, DELETING, DELETED — in order, once each, as CloudEvents DCM's
// consumer accepts.
func TestStatusEventsFollowTheVolumeLifecycle(t *testing.T) {
	r := startReporting(t, gatewaytest.Options{})
	c, stream, east := r.client, r.stream, clusters[0]
	envID := east.Spec.Environment.ID
	path := volumesPath(envID)
	code, body := c.do(http.MethodPatch, "/api/v1alpha1/environments/"+envID, map[string]any{"dcm": map[string]any{"provider_name": "east-storage"}})
	c.want(http.StatusOK, code, body)

	id := uuid.NewString()
	code, body = c.do(http.MethodPost, path+"?id="+id, map[string]any{"spec": storageSpec("events", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	waitEvents(t, stream, id, []string{"PROVISIONING", "RUNNING"}, time.Minute)
	code, body = c.do(http.MethodPatch, path+"/"+id, map[string]any{"capacity": "2Gi"})
	c.want(http.StatusOK, code, body)
	waitEvents(t, stream, id, []string{"PROVISIONING", "RUNNING", "PROVISIONING", "RUNNING"}, time.Minute)
	code, body = c.do(http.MethodDelete, path+"/"+id, nil)
	c.want(http.StatusNoContent, code, body)
	all := waitEvents(t, stream, id, []string{"PROVISIONING", "RUNNING", "PROVISIONING", "RUNNING", "DELETING", "DELETED"}, time.Minute)
	stillExactly(t, stream, map[string][]string{id: {"PROVISIONING", "RUNNING", "PROVISIONING", "RUNNING", "DELETING", "DELETED"}})

	for _, e := range all {
		if e.Data.ID != id {
			continue
		}
		if e.Source != "dcm/providers/east-storage" || e.Type != "dcm.status.storage" || e.Subject != "dcm.storage" ||
			e.ContentType != "application/json" || e.EnvironmentID != envID || e.Time == "" || e.Data.Message == "" {
			t.Fatalf("event does not follow DCM's contract: %+v", e)
		}
		if e.MsgID != e.ID {
			t.Fatalf("message id %q for event %q", e.MsgID, e.ID)
		}
		// A bound volume's events name what it provisioned, as DCM's
		// control plane reads them (data.output_spec.volume_name).
		switch spec := e.Data.OutputSpec; e.Data.Status {
		case "RUNNING":
			if spec == nil || !strings.HasPrefix(spec.VolumeName, "pvc-") {
				t.Fatalf("a RUNNING event without the bound volume in output_spec: %+v", e)
			}
		case "DELETED":
			if spec != nil {
				t.Fatalf("a DELETED event names a volume: %+v", e)
			}
		}
	}
}

// TestWaitingForFirstConsumerIsReported: a WaitForFirstConsumer volume is
// PROVISIONING with the reason in the message.
func TestWaitingForFirstConsumerIsReported(t *testing.T) {
	r := startReporting(t, gatewaytest.Options{})
	c, stream, east := r.client, r.stream, clusters[0]
	id := uuid.NewString()
	code, body := c.do(http.MethodPost, volumesPath(east.Spec.Environment.ID)+"?id="+id,
		map[string]any{"spec": storageSpec("lazy", "1Gi", map[string]any{"storage_class": "standard-wffc"})})
	c.want(http.StatusCreated, code, body)
	events := waitEvents(t, stream, id, []string{"PROVISIONING"}, 30*time.Second)
	for _, e := range events {
		if e.Data.ID == id && e.Data.Message != "waiting for first consumer" {
			t.Fatalf("message %q, want the first-consumer wait", e.Data.Message)
		}
	}
}

// TestNATSOutageLosesNothing: with NATS down for 30 s while volumes change,
// every transition arrives once it is back, none twice.
func TestNATSOutageLosesNothing(t *testing.T) {
	t.Parallel()
	r := startReporting(t, gatewaytest.Options{})
	c, stream, east := r.client, r.stream, clusters[0]
	path := volumesPath(east.Spec.Environment.ID)

	r.nats.Stop()
	outage := time.Now()
	ids := []string{uuid.NewString(), uuid.NewString()}
	for _, id := range ids {
		code, body := c.do(http.MethodPost, path+"?id="+id, map[string]any{"spec": storageSpec("outage", "1Gi", nil)})
		c.want(http.StatusCreated, code, body)
		// Wait until RUNNING is recorded (queued in the outbox while NATS
		// is down) before the next change.
		waitReported(t, r.gateway, id, "RUNNING")
	}
	code, body := c.do(http.MethodDelete, path+"/"+ids[1], nil)
	c.want(http.StatusNoContent, code, body)
	c.eventually(time.Minute, "deleted", func() bool {
		code, _ := c.do(http.MethodGet, path+"/"+ids[1], nil)
		return code == http.StatusNotFound
	})
	time.Sleep(30*time.Second - time.Since(outage))
	r.nats.Restart()

	waitEvents(t, stream, ids[0], []string{"PROVISIONING", "RUNNING"}, time.Minute)
	waitEvents(t, stream, ids[1], []string{"PROVISIONING", "RUNNING", "DELETING", "DELETED"}, time.Minute)
	stillExactly(t, stream, map[string][]string{ids[0]: {"PROVISIONING", "RUNNING"}, ids[1]: {"PROVISIONING", "RUNNING", "DELETING", "DELETED"}})
}

// stillExactly watches for late arrivals for 3 s (lateFor), then checks
// each volume reported exactly its statuses: a republished transition
// (JetStream would drop a repeated message id, so only a second event for
// the same transition could get through) shows up as an extra status.
func stillExactly(t *testing.T, stream *natstest.Stream, want map[string][]string) {
	t.Helper()
	stillExactlyAfter(t, stream, want, 3*time.Second)
}

// stillExactlyAfter is stillExactly watching for late arrivals for the
// given time: it fails as soon as a volume reports more than its statuses.
func stillExactlyAfter(t *testing.T, stream *natstest.Stream, want map[string][]string, lateFor time.Duration) {
	t.Helper()
	poll.Never(t, lateFor, "a volume reported more statuses than it went through", func() bool {
		all := stream.Events()
		for id, statuses := range want {
			if len(natstest.For(all, id)) > len(statuses) {
				return true
			}
		}
		return false
	})
	all := stream.Events()
	for id, statuses := range want {
		if got := natstest.For(all, id); !slices.Equal(got, statuses) {
			t.Fatalf("volume %s reported %v, want exactly %v", id, got, statuses)
		}
	}
}

// TestProvisioningFailuresTurnFailedOnlyAfterTheTimeout: a class whose
// provisioner always fails reports PROVISIONING with the warning, and
// FAILED once provisioning kept failing for the environment's timeout.
func TestProvisioningFailuresTurnFailedOnlyAfterTheTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 5 * time.Second
	r := startReporting(t, gatewaytest.Options{ProvisioningTimeout: timeout})
	c, stream, east := r.client, r.stream, clusters[0]
	id := uuid.NewString()
	created := time.Now()
	code, body := c.do(http.MethodPost, volumesPath(east.Spec.Environment.ID)+"?id="+id,
		map[string]any{"spec": storageSpec("doomed", "1Gi", map[string]any{"storage_class": "broken"})})
	c.want(http.StatusCreated, code, body)

	var mine []natstest.Event
	c.eventually(time.Minute, "FAILED reported", func() bool {
		mine = mine[:0]
		for _, e := range stream.Events() {
			if e.Data.ID == id {
				mine = append(mine, e)
			}
		}
		return len(mine) > 0 && mine[len(mine)-1].Data.Status == "FAILED"
	})
	warned := false
	for _, e := range mine[:len(mine)-1] {
		if e.Data.Status != "PROVISIONING" {
			t.Fatalf("before FAILED: %s %q", e.Data.Status, e.Data.Message)
		}
		warned = warned || strings.HasPrefix(e.Data.Message, "provisioning: ProvisioningFailed: injected failure")
	}
	if !warned {
		t.Fatalf("no PROVISIONING event carried the provisioning warning: %+v", mine)
	}
	failed := mine[len(mine)-1]
	at, err := time.Parse(time.RFC3339Nano, failed.Time)
	if err != nil || at.Sub(created) < timeout {
		t.Fatalf("FAILED at %v, %v after the create; the timeout is %s", failed.Time, at.Sub(created), timeout)
	}
	if !strings.Contains(failed.Data.Message, "injected failure") {
		t.Fatalf("FAILED message %q does not say why", failed.Data.Message)
	}
}
