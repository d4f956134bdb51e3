package e2e

import (
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// TestGatewayKilledAndRestarted: the real binary is killed (SIGKILL) while
// status events are in flight, and a claim is deleted out of band while it
// is down. After a restart every transition arrives, none twice, and the
// vanished claim is reported DELETED.
func TestGatewayKilledAndRestarted(t *testing.T) {
	t.Parallel()
	binary := gatewayproc.Binary(t)
	natsServer := natstest.Start(t)
	stream := natsServer.DCMStream()
	env := gatewayproc.Env(t, binary, "SG_DATABASE_URL="+pgtest.NewDatabase(t).URL, "SG_NATS_URL="+natsServer.URL,
		"SG_ALLOWED_CLUSTER_CIDRS=127.0.0.0/8", "SG_LOG_LEVEL=debug")
	east := clusters[0]
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace

	first := gatewayproc.Start(t, binary, env)
	c := client{t: t, base: "http://" + first.Addr, token: first.Token()}
	c.register(east)
	gone, inFlight := uuid.NewString(), uuid.NewString()
	code, body := c.do(http.MethodPost, volumesPath(envID)+"?id="+gone, map[string]any{"spec": storageSpec("gone", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	waitEvents(t, stream, gone, []string{"PROVISIONING", "RUNNING"}, time.Minute)
	code, body = c.do(http.MethodPost, volumesPath(envID)+"?id="+inFlight, map[string]any{"spec": storageSpec("inflight", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	if err := first.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-first.Done; err == nil {
		t.Fatal("the killed gateway exited cleanly")
	}

	claims := east.AdminClient().CoreV1().PersistentVolumeClaims(ns)
	if err := claims.Delete(t.Context(), gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Minute, "the claim gone from the cluster", func() bool {
		_, err := claims.Get(t.Context(), gone, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})

	gatewayproc.Start(t, binary, env)
	waitEvents(t, stream, inFlight, []string{"PROVISIONING", "RUNNING"}, time.Minute)
	waitEvents(t, stream, gone, []string{"PROVISIONING", "RUNNING", "DELETED"}, 2*time.Minute)
	stillExactly(t, stream, map[string][]string{inFlight: {"PROVISIONING", "RUNNING"}, gone: {"PROVISIONING", "RUNNING", "DELETED"}})
}

// TestShutdownFlushesAndKeepsItsDeadline: SIGTERM publishes a transition
// the flap budget still held; shutdown ends within SG_SHUTDOWN_TIMEOUT
// even with NATS down (events waiting in the outbox) and a cluster
// unreachable, with "stopped" logged last; and the events it could not
// publish reach DCM after the next start.
func TestShutdownFlushesAndKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	const budget = 5 * time.Second
	binary := gatewayproc.Binary(t)
	natsServer := natstest.Start(t)
	stream := natsServer.DCMStream()
	env := gatewayproc.Env(t, binary, "SG_DATABASE_URL="+pgtest.NewDatabase(t).URL, "SG_NATS_URL="+natsServer.URL,
		"SG_ALLOWED_CLUSTER_CIDRS=127.0.0.0/8", "SG_STATUS_DEBOUNCE=10m", "SG_SHUTDOWN_TIMEOUT="+budget.String())
	east := clusters[0]
	envID := east.Spec.Environment.ID

	first := gatewayproc.Start(t, binary, env)
	c := client{t: t, base: "http://" + first.Addr, token: first.Token()}
	c.register(east)
	held := uuid.NewString()
	code, body := c.do(http.MethodPost, volumesPath(envID)+"?id="+held, map[string]any{"spec": storageSpec("held", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	// PROVISIONING and RUNNING spend the volume's two flap tokens, which
	// come back one per ten minutes: the resize that follows is held.
	waitEvents(t, stream, held, []string{"PROVISIONING", "RUNNING"}, time.Minute)
	setResizing(t, east, held, true)
	c.waitStatus(envID, held, "PROVISIONING", time.Minute)
	// stillExactly waits 3s, longer than the follower's 2s sweep of every
	// cached claim: by then the tracker holds PROVISIONING.
	stillExactly(t, stream, map[string][]string{held: {"PROVISIONING", "RUNNING"}})
	stop(t, first)
	waitEvents(t, stream, held, []string{"PROVISIONING", "RUNNING", "PROVISIONING"}, 10*time.Second)

	second := gatewayproc.Start(t, binary, env)
	c = client{t: t, base: "http://" + second.Addr, token: second.Token()}
	c.eventually(time.Minute, "east served again", func() bool {
		_, h := c.do(http.MethodGet, volumesPath(envID)+"/health", nil)
		return h["status"] == "healthy"
	})
	stranded := uuid.NewString()
	code, body = c.do(http.MethodPost, volumesPath(envID)+"?id="+stranded, map[string]any{"spec": storageSpec("stranded", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	waitEvents(t, stream, stranded, []string{"PROVISIONING", "RUNNING"}, time.Minute)
	natsServer.Stop()
	code, body = c.do(http.MethodDelete, volumesPath(envID)+"/"+stranded, nil) // DELETING waits in the outbox
	c.want(http.StatusNoContent, code, body)
	east.SetReachable(false)
	t.Cleanup(func() { east.SetReachable(true) }) // also when the test stops early: the next tests use east
	start := time.Now()
	stop(t, second)
	took := time.Since(start)
	t.Logf("shutdown with NATS down and a cluster unreachable took %s", took)
	if took > budget+2*time.Second {
		t.Fatalf("shutdown with NATS down and a cluster unreachable took %s; SG_SHUTDOWN_TIMEOUT is %s", took, budget)
	}
	lines := strings.Split(strings.TrimSpace(second.Logs()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `"msg":"stopped"`) {
		t.Fatalf("the last log line is %s, want \"stopped\"", last)
	}

	natsServer.Restart()
	east.SetReachable(true)
	gatewayproc.Start(t, binary, env)
	poll.Until(t, time.Minute, "the DELETING queued while NATS was down published after the restart", func() bool {
		return slices.Contains(natstest.For(stream.Events(), stranded), "DELETING")
	})
}

// stop sends SIGTERM and waits for a clean exit.
func stop(t *testing.T, p *gatewayproc.Process) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.Done:
		if err != nil {
			t.Fatalf("gateway stopped with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("gateway did not stop within a minute of SIGTERM")
	}
}

// setResizing sets or clears a claim's Resizing condition, as an external
// resizer does: the volume is PROVISIONING while it is set.
func setResizing(t *testing.T, cluster *harness.Cluster, name string, resizing bool) {
	t.Helper()
	claims := cluster.AdminClient().CoreV1().PersistentVolumeClaims(cluster.Spec.Environment.Namespace)
	pvc, err := claims.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Status.Conditions = nil
	if resizing {
		pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue}}
	}
	if _, err := claims.UpdateStatus(t.Context(), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
