package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	targetcluster "github.com/dcm-project/storage-gateway/deploy/target-cluster"
	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// cli runs the storage-gateway CLI against g with the admin token.
func cli(t *testing.T, binary string, g *gatewayproc.Process, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "SG_GATEWAY_URL=http://"+g.Addr, "SG_GATEWAY_TOKEN="+g.Token(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("storage-gateway %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// env bootstrap, as an admin on their own machine: with the cluster's admin
// kubeconfig it creates the least-privilege ServiceAccount and its RBAC for
// every served namespace, registers the environment with a minted token
// (never the admin's credentials) and it is READY; --rotate rotates a new
// token in; unbootstrap removes what bootstrap created — the
// ServiceAccount's namespace only if bootstrap created it (on east it
// exists before, holding something else; on west bootstrap creates it).
func TestEnvBootstrapConnectsAClusterWithItsOwnServiceAccount(t *testing.T) {
	binary := gatewayproc.Binary(t)
	g := gatewayproc.Start(t, binary, gatewayproc.Env(t, binary, "SG_DATABASE_URL="+pgtest.NewDatabase(t).URL,
		"SG_ALLOWED_CLUSTER_CIDRS=127.0.0.0/8", "SG_EMBEDDED_NATS_LISTEN=off"))
	c := client{t: t, base: "http://" + g.Addr, token: g.Token()}
	ctx := context.Background()
	if _, err := clusters[0].AdminClient().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: targetcluster.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, cl := range clusters {
		t.Run(cl.Name(), func(t *testing.T) { bootstrapAndRemove(t, binary, g, c, cl, cl == clusters[0]) })
	}
}

func bootstrapAndRemove(t *testing.T, binary string, g *gatewayproc.Process, c client, east *harness.Cluster, namespaceExisted bool) {
	c.t = t
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(admin, east.AdminKubeconfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	ns, extra := east.Spec.Environment.Namespace, east.Spec.Environment.AllowedNamespaces
	id := "boot-" + east.Name()
	args := []string{"env", "bootstrap", id, "--kubeconfig", admin, "--namespace", ns}
	for _, a := range extra {
		args = append(args, "--allowed-namespaces", a)
	}
	cli(t, binary, g, args...)

	var env struct {
		Connection struct {
			AuthType              string     `json:"auth_type"`
			CredentialsUpdateTime time.Time  `json:"credentials_update_time"`
			CredentialsExpireTime *time.Time `json:"credentials_expire_time"`
		} `json:"connection"`
		Status struct{ State string } `json:"status"`
	}
	c.getJSON("/api/v1alpha1/environments/"+id, &env)
	// The admin kubeconfig holds a client certificate; the gateway got a token.
	if env.Status.State != "READY" || env.Connection.AuthType != "token" || env.Connection.CredentialsExpireTime == nil ||
		env.Connection.CredentialsExpireTime.Before(time.Now().Add(364*24*time.Hour)) {
		t.Fatalf("after bootstrap: %+v", env)
	}
	ctx := context.Background()
	rbac := east.AdminClient().RbacV1()
	for _, n := range append([]string{ns}, extra...) {
		if _, err := rbac.RoleBindings(n).Get(ctx, targetcluster.VolumesBinding, metav1.GetOptions{}); err != nil {
			t.Fatalf("namespace %s is not bound: %v", n, err)
		}
	}

	first := env.Connection.CredentialsUpdateTime
	cli(t, binary, g, "env", "bootstrap", id, "--kubeconfig", admin, "--rotate")
	c.getJSON("/api/v1alpha1/environments/"+id, &env)
	if env.Status.State != "READY" || !env.Connection.CredentialsUpdateTime.After(first) {
		t.Fatalf("after --rotate: %+v (credentials of %s before)", env, first)
	}

	code, body := c.do(http.MethodDelete, "/api/v1alpha1/environments/"+id, nil)
	c.want(http.StatusNoContent, code, body)
	out := cli(t, binary, g, "env", "unbootstrap", "--kubeconfig", admin)
	t.Log(out)
	for _, n := range append([]string{ns}, extra...) {
		if _, err := rbac.RoleBindings(n).Get(ctx, targetcluster.VolumesBinding, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("namespace %s still bound after unbootstrap (%v)", n, err)
		}
	}
	if _, err := east.AdminClient().CoreV1().ServiceAccounts(targetcluster.Namespace).Get(ctx, targetcluster.ServiceAccount, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the ServiceAccount survived unbootstrap (%v)", err)
	}
	n, err := east.AdminClient().CoreV1().Namespaces().Get(ctx, targetcluster.Namespace, metav1.GetOptions{})
	// The harness runs no namespace controller: a deleted namespace stays
	// Terminating there.
	deleted := apierrors.IsNotFound(err) || err == nil && n.DeletionTimestamp != nil
	if deleted == namespaceExisted {
		t.Fatalf("namespace %s deleted: %v; it existed before bootstrap: %v (%v)", targetcluster.Namespace, deleted, namespaceExisted, err)
	}
	if _, err := rbac.ClusterRoles().Get(ctx, "storage-gateway:volumes", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the volumes role survived unbootstrap (%v)", err)
	}
}
