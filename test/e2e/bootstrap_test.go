package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	targetcluster "github.com/dcm-project/storage-gateway/deploy/target-cluster"
	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/syncbuf"
)

// cli runs the storage-gateway CLI against g with the admin token.
func cli(t *testing.T, binary string, g *gatewayproc.Process, args ...string) string {
	t.Helper()
	out, err := cliCommand(t, binary, g, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("storage-gateway %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// cliCommand is the command cli runs.
func cliCommand(t *testing.T, binary string, g *gatewayproc.Process, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "SG_GATEWAY_URL=http://"+g.Addr, "SG_GATEWAY_TOKEN="+g.Token(), "HOME="+t.TempDir())
	return cmd
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
	// Deleted, or on its way (the namespace controller empties it first).
	deleted := apierrors.IsNotFound(err) || err == nil && n.DeletionTimestamp != nil
	if deleted == namespaceExisted {
		t.Fatalf("namespace %s deleted: %v; it existed before bootstrap: %v (%v)", targetcluster.Namespace, deleted, namespaceExisted, err)
	}
	if _, err := rbac.ClusterRoles().Get(ctx, "storage-gateway:volumes", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the volumes role survived unbootstrap (%v)", err)
	}
}

// env bootstrap is all or nothing: a served namespace that does not exist,
// or an admin without the permissions bootstrap needs, is refused before
// anything is written; a registration the gateway refuses removes what the
// run created; and bootstrapping again right after unbootstrap waits for
// the ServiceAccount's namespace to finish terminating, saying so.
func TestEnvBootstrapIsAllOrNothing(t *testing.T) {
	binary := gatewayproc.Binary(t)
	g := gatewayproc.Start(t, binary, gatewayproc.Env(t, binary, "SG_DATABASE_URL="+pgtest.NewDatabase(t).URL,
		"SG_ALLOWED_CLUSTER_CIDRS=127.0.0.0/8", "SG_EMBEDDED_NATS_LISTEN=off"))
	west := clusters[1]
	ctx := context.Background()
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(admin, west.AdminKubeconfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := west.Spec.Environment.Namespace
	fails := func(t *testing.T, kubeconfig string, args []string, want ...string) string {
		t.Helper()
		out, err := cliCommand(t, binary, g, append([]string{"env", "bootstrap", "--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		if err == nil {
			t.Fatalf("env bootstrap %v succeeded:\n%s", args, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Fatalf("env bootstrap %v does not say %q:\n%s", args, w, out)
			}
		}
		return string(out)
	}
	left := func(t *testing.T) []string {
		t.Helper()
		return bootstrapObjects(t, west)
	}
	west.RemoveNamespace(t, targetcluster.Namespace)

	t.Run("a served namespace that does not exist", func(t *testing.T) {
		fails(t, admin, []string{"boot-missing", "--namespace", "no-such-namespace"},
			"namespace no-such-namespace does not exist", "--create-namespace", "nothing was changed")
		if got := left(t); len(got) > 0 {
			t.Fatalf("left in the cluster: %v", got)
		}
	})

	t.Run("an admin who may not", func(t *testing.T) {
		token, err := west.RestrictedToken(ctx, "bootstrap-reader", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}}})
		if err != nil {
			t.Fatal(err)
		}
		data, err := harness.TokenKubeconfig("west", west.DirectServerURL(), west.CAData(), token, ns)
		if err != nil {
			t.Fatal(err)
		}
		reader := filepath.Join(t.TempDir(), "reader.kubeconfig")
		if err := os.WriteFile(reader, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fails(t, reader, []string{"boot-reader", "--namespace", ns}, "may not create namespaces", "create clusterroles",
			"create rolebindings in namespace "+ns, "create serviceaccounts/token in namespace storage-gateway", "nothing was changed")
		if got := left(t); len(got) > 0 {
			t.Fatalf("left in the cluster: %v", got)
		}
	})

	t.Run("a registration the gateway refuses", func(t *testing.T) {
		out := fails(t, admin, []string{"boot-refused", "--namespace", ns, "--allowed-namespaces", "bootstrap-fresh",
			"--create-namespace", "--label", "not a key=x"}, "INVALID_ARGUMENT", "removed Namespace bootstrap-fresh", "removed ServiceAccount")
		t.Log(out)
		if got := left(t); len(got) > 0 {
			t.Fatalf("left in the cluster: %v", got)
		}
		for _, n := range []string{"bootstrap-fresh", targetcluster.Namespace} {
			got, err := west.AdminClient().CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
			if err == nil && got.DeletionTimestamp == nil {
				t.Errorf("namespace %s, created by the failed run, is still there", n)
			}
		}
		c := client{t: t, base: "http://" + g.Addr, token: g.Token()}
		code, body := c.do(http.MethodGet, "/api/v1alpha1/environments/boot-refused", nil)
		c.want(http.StatusNotFound, code, body)
	})

	t.Run("again right after unbootstrap", func(t *testing.T) {
		west.RemoveNamespace(t, targetcluster.Namespace)
		cli(t, binary, g, "env", "bootstrap", "boot-again", "--kubeconfig", admin, "--namespace", ns)
		// Something in the namespace holds it while it terminates.
		held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: targetcluster.Namespace,
			Finalizers: []string{"storage-gateway.test/hold"}}}
		if _, err := west.AdminClient().CoreV1().ConfigMaps(targetcluster.Namespace).Create(ctx, held, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cli(t, binary, g, "env", "rm", "boot-again")
		cli(t, binary, g, "env", "unbootstrap", "--kubeconfig", admin)

		out := &syncbuf.Buffer{}
		again := cliCommand(t, binary, g, "env", "bootstrap", "boot-again", "--kubeconfig", admin, "--namespace", ns)
		again.Stdout, again.Stderr = out, out
		if err := again.Start(); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, time.Minute, "bootstrap says it waits", func() bool {
			return strings.Contains(out.String(), "waiting for namespace storage-gateway to finish terminating")
		})
		if _, err := west.AdminClient().CoreV1().ConfigMaps(targetcluster.Namespace).Patch(ctx, "held", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := again.Wait(); err != nil {
			t.Fatalf("bootstrap after unbootstrap: %v\n%s", err, out)
		}
		c := client{t: t, base: "http://" + g.Addr, token: g.Token()}
		var env struct {
			Status struct{ State string } `json:"status"`
		}
		c.getJSON("/api/v1alpha1/environments/boot-again", &env)
		if env.Status.State != "READY" {
			t.Fatalf("after bootstrap again: %+v\n%s", env, out)
		}
		// Undoing a refused run removes only what that run created: what the
		// registered environment depends on stays.
		before := bootstrapObjects(t, west)
		fails(t, admin, []string{"boot-again", "--namespace", ns, "--allowed-namespaces", "bootstrap-later", "--create-namespace",
			"--label", "not a key=x"}, "INVALID_ARGUMENT", "removed Namespace bootstrap-later")
		slices.Sort(before)
		if after := slices.Sorted(slices.Values(bootstrapObjects(t, west))); !slices.Equal(after, before) || len(before) == 0 {
			t.Fatalf("a refused second run changed what the first made: %v before, %v after", before, after)
		}
		c.getJSON("/api/v1alpha1/environments/boot-again", &env)
		if env.Status.State != "READY" {
			t.Fatalf("after a refused second run: %+v", env)
		}
		cli(t, binary, g, "env", "rm", "boot-again")
		cli(t, binary, g, "env", "unbootstrap", "--kubeconfig", admin)
	})
}

// bootstrapObjects lists what bootstrap makes that exists in c.
func bootstrapObjects(t *testing.T, c *harness.Cluster) []string {
	t.Helper()
	ctx := context.Background()
	var found []string
	opts := metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=storage-gateway"}
	roles, err := c.AdminClient().RbacV1().ClusterRoles().List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles.Items {
		found = append(found, "ClusterRole/"+r.Name)
	}
	crbs, err := c.AdminClient().RbacV1().ClusterRoleBindings().List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range crbs.Items {
		found = append(found, "ClusterRoleBinding/"+b.Name)
	}
	rbs, err := c.AdminClient().RbacV1().RoleBindings(metav1.NamespaceAll).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range rbs.Items {
		found = append(found, "RoleBinding/"+b.Namespace+"/"+b.Name)
	}
	if sa, err := c.AdminClient().CoreV1().ServiceAccounts(targetcluster.Namespace).Get(ctx, targetcluster.ServiceAccount,
		metav1.GetOptions{}); err == nil && sa.DeletionTimestamp == nil {
		found = append(found, "ServiceAccount/"+sa.Name)
	}
	return found
}
