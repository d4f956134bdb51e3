package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dcm-project/storage-gateway/internal/volumes"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// TestAClaimBelongsToOneEnvironment: two environments registered on one
// cluster namespace, two gateway installations on one cluster and an
// environment registered again under a new id never take over each
// other's claims. A second registration of a namespace is refused (found
// through another address of the cluster too) unless sharing is asked
// for, and then each environment serves only its own claims; a create
// meeting another's claim answers 409 naming its holder and deletes
// nothing; a replay asking for another spec answers 409 naming the field;
// only an adoption told to take over moves a claim, on the audit record.
func TestAClaimBelongsToOneEnvironment(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{ReconcileInterval: time.Second})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	tenants, err := east.Tenants(t.Context(), "owner-"+uuid.NewString()[:8], 1)
	if err != nil {
		t.Fatal(err)
	}
	ns := tenants[0].Namespace
	proxied, err := east.TenantKubeconfig(tenants[0])
	if err != nil {
		t.Fatal(err)
	}
	direct, err := east.DirectTenantKubeconfig(tenants[0])
	if err != nil {
		t.Fatal(err)
	}
	register := func(c client, id string, kc []byte, share bool) (int, map[string]any) {
		c.t.Helper()
		return c.do(http.MethodPost, "/api/v1alpha1/environments?id="+id, map[string]any{"kubeconfig": string(kc), "share_namespaces": share})
	}
	healthy := func(c client, id string) {
		c.t.Helper()
		c.eventually(30*time.Second, "healthy provider "+id, func() bool {
			_, h := c.do(http.MethodGet, volumesPath(id)+"/health", nil)
			return h["status"] == "healthy"
		})
	}
	// reRegister forgets the environments of ids (their claims stay) and
	// registers id on the namespace again.
	reRegister := func(id string, forget ...string) {
		t.Helper()
		for _, old := range forget {
			code, body := c.do(http.MethodDelete, "/api/v1alpha1/environments/"+old+"?force=true", nil)
			c.want(http.StatusNoContent, code, body)
		}
		code, body := register(c, id, proxied, false)
		c.want(http.StatusCreated, code, body)
		healthy(c, id)
	}
	create := func(c client, envID, id, capacity string) (int, map[string]any) {
		c.t.Helper()
		return c.do(http.MethodPost, volumesPath(envID)+"?id="+id, map[string]any{"spec": storageSpec(id, capacity, nil)})
	}
	claim := func() *corev1.PersistentVolumeClaim {
		t.Helper()
		pvc, err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "shared1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("local-west's claim: %v", err)
		}
		return pvc
	}
	// One namespace, one environment: a second registration is refused,
	// through another address of the same cluster too.
	code, body := register(c, "first", proxied, false)
	c.want(http.StatusCreated, code, body)
	healthy(c, "first")
	if id, _ := field(body, "status", "cluster_id").(string); !strings.HasPrefix(id, "kube-system/") {
		t.Fatalf("cluster_id %q, want the kube-system namespace's uid", id)
	}
	code, body = register(c, "second", direct, false)
	c.want(http.StatusConflict, code, body, `environment "first"`, "namespace", "share_namespaces")
	code, body = register(c, "second", direct, true)
	c.want(http.StatusCreated, code, body)
	if body["share_namespaces"] != true {
		t.Fatalf("registered sharing: %v", body)
	}
	healthy(c, "second")

	// Shared on purpose: each environment serves only its own claims.
	code, body = create(c, "first", "shared1", "1Gi")
	c.want(http.StatusCreated, code, body)
	c.waitStatus("first", "shared1", "RUNNING", time.Minute)
	uid := claim().UID
	// The installation's identity is drawn by its first create.
	installation := pgtest.Column[string](t, g.DB, `SELECT id::text FROM installation`)
	if l := claim().Labels; len(installation) != 1 || l[volumes.InstallationLabel] != installation[0] || l[volumes.EnvironmentLabel] != "first" {
		t.Fatalf("claim labels %v, want the installation %v and environment first", l, installation)
	}
	code, body = create(c, "second", "shared1", "1Gi")
	c.want(http.StatusConflict, code, body, `environment "first" of this gateway`)
	code, body = c.do(http.MethodDelete, volumesPath("second")+"/shared1", nil)
	c.want(http.StatusNotFound, code, body)
	// A replay is a replay: the same id asking for more is refused,
	// naming the field, and changes nothing.
	code, body = create(c, "first", "shared1", "5Gi")
	c.want(http.StatusConflict, code, body, "spec.capacity")
	if got := claim(); got.UID != uid || !got.Spec.Resources.Requests.Storage().Equal(resource.MustParse("1Gi")) {
		t.Fatalf("the claim changed: %v", got.Spec.Resources)
	}
	c.waitStatus("first", "shared1", "RUNNING", time.Second)

	// DCM's storage SP's claim is unadopted in both; first's claim is
	// counted by neither.
	sp := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "sp-made", Namespace: ns, Labels: map[string]string{
			"dcm.project/managed-by": "dcm", "dcm.project/dcm-instance-id": "sp-made", "dcm.project/dcm-service-type": "storage"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	if _, err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), sp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"first", "second"} {
		c.eventually(30*time.Second, id+" counts one unadopted claim", func() bool {
			_, env := c.do(http.MethodGet, "/api/v1alpha1/environments/"+id, nil)
			return field(env, "status", "unadopted_volume_count") == float64(1)
		})
	}

	// Another installation (its own database) on the same cluster and
	// namespace, even under the same environment id, holds nothing of
	// this one's.
	other := gatewaytest.Start(t, gatewaytest.Options{})
	oc := client{t: t, base: other.URL, token: other.Tokens.Admin}
	code, body = register(oc, "first", proxied, false)
	oc.want(http.StatusCreated, code, body)
	healthy(oc, "first")
	code, body = create(oc, "first", "shared1", "1Gi")
	oc.want(http.StatusConflict, code, body, "another storage-gateway installation ("+installation[0]+")")
	code, body = oc.do(http.MethodDelete, volumesPath("first")+"/shared1", nil)
	oc.want(http.StatusNotFound, code, body)
	code, body = oc.do(http.MethodPost, "/api/v1alpha1/environments/first:adopt", nil)
	oc.want(http.StatusOK, code, body)
	if !slices.ContainsFunc(body["skipped"].([]any), func(s any) bool {
		return s.(map[string]any)["name"] == "shared1" && strings.Contains(s.(map[string]any)["reason"].(string), "take_over")
	}) {
		t.Fatalf("another installation's adoption did not skip shared1 naming take_over: %v", body)
	}
	if got := claim(); got.UID != uid || got.DeletionTimestamp != nil {
		t.Fatalf("the claim was touched by the other installation: %+v", got.ObjectMeta)
	}

	// The same id registered again after a forced removal: its claim is
	// its own again, and a create is a replay only with the same spec.
	reRegister("first", "second", "first")
	code, body = create(c, "first", "shared1", "5Gi")
	c.want(http.StatusConflict, code, body, "different spec", "spec.capacity")
	code, body = create(c, "first", "shared1", "1Gi")
	c.want(http.StatusCreated, code, body)
	c.waitStatus("first", "shared1", "RUNNING", 30*time.Second)

	// Registered again under a new id, the environment finds its old
	// claims held by the old id: only an adoption that takes over moves
	// them.
	reRegister("third", "first")
	code, body = create(c, "third", "shared1", "1Gi")
	c.want(http.StatusConflict, code, body, `environment "first" of this gateway`)
	code, body = c.do(http.MethodPost, "/api/v1alpha1/environments/third:adopt", nil)
	c.want(http.StatusOK, code, body)
	if got := adoptedIDs(body); !slices.Equal(got, []string{"sp-made"}) {
		t.Fatalf("adopted %v without take_over, want only DCM's storage SP's claim", got)
	}
	code, body = c.do(http.MethodPost, "/api/v1alpha1/environments/third:adopt", map[string]any{"take_over": true})
	c.want(http.StatusOK, code, body)
	if got := adoptedIDs(body); !slices.Equal(got, []string{"shared1"}) {
		t.Fatalf("adopted %v with take_over, want shared1", got)
	}
	if got := claim(); got.UID != uid || got.Labels[volumes.EnvironmentLabel] != "third" {
		t.Fatalf("the claim taken over: %+v", got.ObjectMeta)
	}
	c.waitStatus("third", "shared1", "RUNNING", 30*time.Second)

	// A claim made before claims named their owner (labels stripped here)
	// is the environment's by the uid its record holds, and gets its
	// labels back from the reconciler.
	if _, err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Patch(t.Context(), "shared1", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/metadata/labels/storage-gateway.dcm.project~1installation"},`+
			`{"op":"remove","path":"/metadata/labels/storage-gateway.dcm.project~1environment"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually(30*time.Second, "the owner labels written back", func() bool {
		l := claim().Labels
		return l[volumes.EnvironmentLabel] == "third" && l[volumes.InstallationLabel] == installation[0]
	})
	c.waitStatus("third", "shared1", "RUNNING", time.Second)

	// The overrides are on the audit record under actions of their own.
	for _, action := range []string{"createEnvironmentSharingNamespaces", "adoptVolumesTakingOver"} {
		code, page := c.do(http.MethodGet, "/api/v1alpha1/audit-events?action="+action, nil)
		c.want(http.StatusOK, code, page)
		if events, _ := page["audit_events"].([]any); len(events) != 1 {
			t.Fatalf("audit events of %s: %v, want one", action, page)
		}
	}
	// Deleted through its holder, the claim goes.
	code, body = c.do(http.MethodDelete, volumesPath("third")+"/shared1", nil)
	c.want(http.StatusNoContent, code, body)
	c.eventually(time.Minute, "the claim deleted", func() bool {
		_, err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "shared1", metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found")
	})
}
