// Package targetcluster_test proves deploy/target-cluster: the manifest
// grants exactly the permissions the gateway's probe requires — each one,
// and nothing else — and a token of its ServiceAccount passes the probe on
// a real API server.
package targetcluster_test

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/auth/rbac/validation"
	"k8s.io/utils/ptr"

	targetcluster "github.com/dcm-project/storage-gateway/deploy/target-cluster"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/egress"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/kubeobjects"
	"github.com/dcm-project/storage-gateway/test/harness"
)

var cluster *harness.Cluster

func TestMain(m *testing.M) {
	os.Exit(harness.RunWithLocalClusters(m, 1, func(c []*harness.Cluster) { cluster = c[0] }))
}

const manifest = "storage-gateway-rbac.yaml" // what targetcluster.RBAC embeds

// servedNamespace is the namespace the manifest's RoleBinding grants.
const servedNamespace = "dcm-volumes"

func objects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := targetcluster.Objects([]string{servedNamespace})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// rules returns the rules of the manifest's ClusterRole name.
func rules(t *testing.T, objs []*unstructured.Unstructured, name string) []rbacv1.PolicyRule {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == name {
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
			return role.Rules
		}
	}
	t.Fatalf("no ClusterRole %s in %s", name, manifest)
	return nil
}

// The manifest's rules cover every permission the probe requires, cluster
// scoped and namespaced where the probe asks for each, and the optional ones
// the gateway uses where it may, and grant nothing else.
func TestManifestGrantsExactlyWhatTheProbeRequires(t *testing.T) {
	objs := objects(t)
	cluster, namespaced := rules(t, objs, "storage-gateway:storage-read"), rules(t, objs, "storage-gateway:volumes")
	required := append(clusters.RequiredPermissions([]string{servedNamespace}), clusters.OptionalPermissions([]string{servedNamespace})...)
	for _, p := range required {
		granted := cluster
		if p.Namespace != "" {
			granted = namespaced
		}
		need := rbacv1.PolicyRule{Verbs: []string{p.Verb}, APIGroups: []string{p.Group}, Resources: []string{p.Resource}}
		if p.Name != "" {
			need.ResourceNames = []string{p.Name}
		}
		if ok, _ := validation.Covers(granted, []rbacv1.PolicyRule{need}); !ok {
			t.Errorf("the manifest does not grant %s", p)
		}
	}
	for scope, granted := range map[string][]rbacv1.PolicyRule{"cluster": cluster, "namespaced": namespaced} {
		for _, r := range granted {
			for _, group := range r.APIGroups {
				for _, res := range r.Resources {
					for _, verb := range r.Verbs {
						if !slices.ContainsFunc(required, func(p clusters.Permission) bool {
							return p.Group == group && p.Resource == res && p.Verb == verb && (p.Namespace != "") == (scope == "namespaced") &&
								(p.Name == "" && len(r.ResourceNames) == 0 || slices.Equal(r.ResourceNames, []string{p.Name}))
						}) {
							t.Errorf("the manifest grants %s %s.%s (%s), which the gateway does not need", verb, res, group, scope)
						}
					}
				}
			}
		}
	}
}

// Applied to a real cluster, the manifest's ServiceAccount passes the probe
// for the namespace it is bound in, and is refused, naming what is missing,
// for one it is not.
func TestManifestPassesTheProbe(t *testing.T) {
	ctx := context.Background()
	client, err := kubeobjects.NewClient(cluster.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objects(t) {
		gvk := obj.GroupVersionKind()
		res, err := client.Resource(obj, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("apply %s %s: %v", gvk.Kind, obj.GetName(), err)
		}
	}
	tr, err := cluster.AdminClient().CoreV1().ServiceAccounts("storage-gateway").CreateToken(ctx, "storage-gateway",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn := kubeconfig.Connection{Server: cluster.DirectServerURL(), CAData: cluster.CAData(), Token: tr.Status.Token}
	prober := clusters.NewProber(clusters.ProberOptions{
		Client:  clusters.ClientOptions{Egress: egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, Timeout: 10 * time.Second},
		Timeout: 10 * time.Second})
	if res := prober.Probe(ctx, "target", conn, []string{servedNamespace}); res.State != clusters.HealthReady {
		t.Fatalf("probe with the manifest's ServiceAccount in %s: %+v", servedNamespace, res)
	}
	const unbound = "not-granted"
	if res := prober.Probe(ctx, "target", conn, []string{unbound}); res.State != clusters.HealthUnauthorized ||
		!strings.Contains(res.Message, "persistentvolumeclaims in namespace "+unbound) {
		t.Fatalf("probe for a namespace without the RoleBinding: %+v, want UNAUTHORIZED naming its claims", res)
	}
}

// The gateway tells a token bootstrap minted by its subject, to say how to
// rotate it: that subject is this manifest's ServiceAccount.
func TestBootstrapSubjectIsTheServiceAccount(t *testing.T) {
	if want := "system:serviceaccount:" + targetcluster.Namespace + ":" + targetcluster.ServiceAccount; environments.BootstrapSubject != want {
		t.Fatalf("environments.BootstrapSubject is %q, the manifest's ServiceAccount %q", environments.BootstrapSubject, want)
	}
}
