package e2e

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// TestGatewayKilledAndRestarted: the real binary is killed (SIGKILL) while
// status events are in flight, and a claim is deleted out of band while it
// is down. After a restart every transition arrives, none twice, and the
// vanished claim is reported DELETED.
func TestGatewayKilledAndRestarted(t *testing.T) {
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
