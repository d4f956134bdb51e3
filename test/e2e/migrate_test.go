package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/resource_manager"
	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/storagesp"
)

// TestMigrateFromTheStorageSP moves a site from DCM's per-cluster storage
// provider onto the gateway exactly as the README's cut-over says, against
// DCM's real service-provider-manager: instances created through DCM by the
// old provider (a stand-in making the very claims it makes) are left alone
// and counted until adopted, adoption (dry run first) reports each one's
// status once, the gateway takes over the provider's name, and those same
// instances are then read, expanded and deleted through DCM and the
// gateway, their status reaching DCM's stream; a new instance under the old
// name lands on the gateway.
func TestMigrateFromTheStorageSP(t *testing.T) {
	site := startDCMSite(t, gatewaytest.Options{})
	c, stream, g, providers, instances := site.client, site.stream, site.gateway, site.providers, site.instances
	east := clusters[0]
	tenants, err := east.Tenants(t.Context(), "migrate", 1)
	if err != nil {
		t.Fatal(err)
	}
	ns := tenants[0].Namespace

	// The site before: the old provider, registered in DCM, with instances.
	old := storagesp.Start(t, "k8s-storage-sp-east", site.spmURL, east.AdminClient(), ns)
	provider := func() (endpoint, health string) {
		got, err := providers.GetProviderWithResponse(t.Context(), old.ProviderID)
		if err != nil || got.JSON200 == nil {
			return "", ""
		}
		if got.JSON200.HealthStatus != nil {
			health = *got.JSON200.HealthStatus
		}
		return got.JSON200.Endpoint, health
	}
	c.eventually(time.Minute, "the old provider ready in DCM", func() bool { _, h := provider(); return h == "ready" })
	createInstance := func(id string, spec map[string]any) {
		t.Helper()
		created, err := instances.CreateInstanceWithResponse(t.Context(), &rmapi.CreateInstanceParams{Id: &id},
			rmapi.ServiceTypeInstance{ProviderName: old.Name, Spec: spec})
		if err != nil || created.JSON201 == nil {
			t.Fatalf("create instance %s through DCM: %v %d %s", id, err, created.StatusCode(), created.Body)
		}
	}
	showDeleted := true
	instanceStatus := func(id string) string {
		got, err := instances.GetInstanceWithResponse(t.Context(), id, &rmapi.GetInstanceParams{ShowDeleted: &showDeleted})
		if err != nil || got.JSON200 == nil || got.JSON200.Status == nil {
			return ""
		}
		return *got.JSON200.Status
	}
	// The old provider names each claim by the instance's
	// spec.metadata.name, which must equal its id.
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	slices.Sort(ids) // the order the gateway lists them in
	grow, drop, keep := ids[0], ids[1], ids[2]
	createInstance(grow, storageSpec(grow, "1Gi", map[string]any{"storage_class": "standard"}))
	createInstance(drop, storageSpec(drop, "2Gi", nil)) // the cluster's default class
	createInstance(keep, storageSpec(keep, "1Gi", map[string]any{"storage_class": "standard", "access_mode": "ReadWriteOnce"}))
	c.eventually(time.Minute, "the old provider's claims bound", func() bool {
		pvcs, err := old.Claims(t.Context())
		bound := 0
		for _, pvc := range pvcs {
			if pvc.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		return err == nil && bound == len(ids)
	})
	before := claimVersions(t, east, ns)

	// 1. Register the environment under the old provider's name, with
	// registration off: DCM still calls the old provider.
	kc, err := east.TenantKubeconfig(tenants[0])
	if err != nil {
		t.Fatal(err)
	}
	envID := "migrate-east"
	code, body := c.do(http.MethodPost, "/api/v1alpha1/environments?id="+envID, map[string]any{
		"kubeconfig": string(kc), "dcm": map[string]any{"register": false, "provider_name": old.Name},
	})
	c.want(http.StatusCreated, code, body)
	c.eventually(time.Minute, "the other provider's claims counted, not served", func() bool {
		_, env := c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
		return field(env, "status", "unadopted_volume_count") == float64(len(ids)) && field(env, "status", "volume_count") == float64(0)
	})
	code, body = c.do(http.MethodGet, volumesPath(envID)+"/"+keep, nil)
	c.want(http.StatusNotFound, code, body)
	// A create of one of them is refused, not an implicit adoption.
	code, body = c.do(http.MethodPost, volumesPath(envID)+"?id="+keep, map[string]any{"spec": storageSpec(keep, "1Gi", nil)})
	c.want(http.StatusConflict, code, body, "another provider", ":adopt")
	// Nor is a record an interrupted create left behind (the process died
	// between recording the intent and finding the claim): the reconciler
	// drops it instead of binding the other provider's claim.
	if _, err := g.DB.Exec(t.Context(), `INSERT INTO volumes (environment_id, id, namespace, spec, status, status_message)
		VALUES ($1, $2, $3, $4, 'PROVISIONING', 'creating the claim')`, envID, keep, ns,
		fmt.Sprintf(`{"name": %q, "namespace": %q, "capacity": "1Gi", "storage_class": "standard"}`, keep, ns)); err != nil {
		t.Fatal(err)
	}
	g.Volumes.ReconcileEnvironment(t.Context(), envID)
	if code, body := c.do(http.MethodGet, volumesPath(envID)+"/"+keep, nil); code != http.StatusNotFound {
		t.Fatalf("the reconciler kept a record bound to the other provider's claim: %d %v", code, body)
	}

	// 2. Adopt: first a dry run, which changes nothing.
	adopt := func(req map[string]any) map[string]any {
		t.Helper()
		var send any // no body at all: the request's fields are optional
		if req != nil {
			send = req
		}
		code, body := c.do(http.MethodPost, "/api/v1alpha1/environments/"+envID+":adopt", send)
		c.want(http.StatusOK, code, body)
		return body
	}
	dry := adopt(map[string]any{"validate_only": true})
	if got := adoptedIDs(dry); !slices.Equal(got, ids) || len(dry["skipped"].([]any)) != 0 || dry["recorded_count"] != float64(0) || dry["validate_only"] != true {
		t.Fatalf("dry run: %v", dry)
	}
	for _, v := range dry["adopted"].([]any) {
		v := v.(map[string]any)
		if v["status"] != "RUNNING" || field(v, "spec", "metadata", "namespace") != ns || field(v, "spec", "metadata", "name") != v["id"] ||
			field(v, "spec", "metadata", "storage_class") != "standard" || field(v, "spec", "metadata", "labels", "team") != "e2e" {
			t.Fatalf("dry run shows %v", v)
		}
	}
	if code, body := c.do(http.MethodGet, volumesPath(envID)+"/"+keep, nil); code != http.StatusNotFound {
		t.Fatalf("a dry run recorded a volume: %d %v", code, body)
	}
	done := adopt(nil)
	if got := adoptedIDs(done); !slices.Equal(got, ids) || done["validate_only"] != false {
		t.Fatalf("adoption: %v", done)
	}
	want := map[string][]string{}
	for _, id := range ids {
		c.waitStatus(envID, id, "RUNNING", 10*time.Second)
		want[id] = []string{"RUNNING"}
		waitEvents(t, stream, id, want[id], time.Minute)
		// DCM's record converges on the status the old provider never sent.
		c.eventually(time.Minute, "DCM's record of "+id+" RUNNING", func() bool { return instanceStatus(id) == "RUNNING" })
	}
	_, env := c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
	if field(env, "status", "unadopted_volume_count") != float64(0) || field(env, "status", "volume_count") != float64(len(ids)) {
		t.Fatalf("after adoption the environment shows %v", env["status"])
	}
	again := adopt(nil)
	if len(again["adopted"].([]any)) != 0 || again["recorded_count"] != float64(len(ids)) {
		t.Fatalf("adopting again: %v", again)
	}
	stillExactly(t, stream, want)
	if after := claimVersions(t, east, ns); !maps.Equal(after, before) {
		t.Fatalf("adoption wrote to the cluster: claims %v before, %v after", before, after)
	}

	// 3. Stop the old provider; 4. turn registration on: the gateway takes
	// the provider's name, and DCM's existing instances reach it.
	old.Stop()
	code, body = c.do(http.MethodPatch, "/api/v1alpha1/environments/"+envID, map[string]any{"dcm": map[string]any{"register": true}},
		"Content-Type", "application/merge-patch+json")
	c.want(http.StatusOK, code, body)
	c.eventually(time.Minute, "the gateway registered under the old provider's name", func() bool {
		_, env := c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
		endpoint, health := provider()
		return field(env, "status", "dcm_registration", "state") == "REGISTERED" &&
			field(env, "status", "dcm_registration", "provider_id") == old.ProviderID &&
			endpoint == g.URL+volumesPath(envID) && health == "ready"
	})

	// The same instances, through DCM and the gateway.
	if got := instanceStatus(keep); got != "RUNNING" {
		t.Fatalf("DCM reads %s as %q", keep, got)
	}
	code, body = c.do(http.MethodPatch, volumesPath(envID)+"/"+grow, map[string]any{"capacity": "2Gi"})
	c.want(http.StatusOK, code, body)
	c.waitStatus(envID, grow, "RUNNING", time.Minute, "2Gi")
	want[grow] = []string{"RUNNING", "PROVISIONING", "RUNNING"}
	waitEvents(t, stream, grow, want[grow], time.Minute)
	deleted, err := instances.DeleteInstanceWithResponse(t.Context(), drop, &rmapi.DeleteInstanceParams{})
	if err != nil || deleted.StatusCode() >= 300 {
		t.Fatalf("delete instance %s through DCM: %v %d %s", drop, err, deleted.StatusCode(), deleted.Body)
	}
	c.eventually(time.Minute, "the deleted instance's claim gone", func() bool { return claims(t, east, ns, drop) == 0 })
	want[drop] = []string{"RUNNING", "DELETING", "DELETED"}
	waitEvents(t, stream, drop, want[drop], time.Minute)

	// A new instance under the old provider's name is the gateway's.
	fresh := uuid.NewString()
	createInstance(fresh, storageSpec("after-cut-over", "1Gi", nil))
	c.waitStatus(envID, fresh, "RUNNING", time.Minute)
	c.eventually(time.Minute, "DCM's record of the new instance RUNNING", func() bool { return instanceStatus(fresh) == "RUNNING" })
	want[fresh] = []string{"PROVISIONING", "RUNNING"}
	stillExactly(t, stream, want)
	code, body = c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID+"/volumes", nil)
	c.want(http.StatusOK, code, body)
	if got := volumeIDs(body); !slices.Equal(got, sorted(grow, keep, fresh)) {
		t.Fatalf("the environment lists %v, want %v", got, sorted(grow, keep, fresh))
	}
}

// TestAdoptionSkipsWhatItCannotServe: adoption takes a labelled claim only
// when it can serve it exactly as the gateway's own — labels consistent, a
// valid volume id, no record elsewhere, not being deleted — and says why it
// skipped each of the others; claims for other DCM services are none of its
// business; it writes nothing to the cluster, and it is audited.
func TestAdoptionSkipsWhatItCannotServe(t *testing.T) {
	r := startReporting(t, gatewaytest.Options{})
	east, west := clusters[0], clusters[1]
	r.register(west)
	westID := west.Spec.Environment.ID
	code, body := r.do(http.MethodPost, volumesPath(westID)+"?id=recorded-elsewhere", map[string]any{"spec": storageSpec("elsewhere", "1Gi", nil)})
	r.want(http.StatusCreated, code, body)

	tenants, err := east.Tenants(t.Context(), "adopt", 1)
	if err != nil {
		t.Fatal(err)
	}
	ns := tenants[0].Namespace
	// The claims wait for a consumer (none comes): nothing but this test
	// writes to them, so any write adoption made would show.
	waitClass := "standard-wffc"
	peer := func(name, instanceID, service string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
				"dcm.project/managed-by": "dcm", "dcm.project/dcm-instance-id": instanceID, "dcm.project/dcm-service-type": service,
			}},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: &waitClass,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
	}
	leaving := peer("leaving", "leaving", "storage")
	leaving.Finalizers = []string{"e2e.storage-gateway/hold"}
	classless := peer("classless", "classless", "storage")
	retired := "retired-class" // no such class in the cluster
	classless.Spec.StorageClassName = &retired
	for _, pvc := range []*corev1.PersistentVolumeClaim{
		peer("good", "good", "storage"),
		peer("mislabelled", "another-id", "storage"),
		peer("health", "health", "storage"),
		peer("dotted.name", "dotted.name", "storage"),
		peer("recorded-elsewhere", "recorded-elsewhere", "storage"),
		peer("a-database", "a-database", "database"), // not storage: not adoption's business
		leaving,
		classless,
	} {
		if _, err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claimsAPI := east.AdminClient().CoreV1().PersistentVolumeClaims(ns)
	if err := claimsAPI.Delete(t.Context(), "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = claimsAPI.Patch(t.Context(), "leaving", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	kc, err := east.TenantKubeconfig(tenants[0])
	if err != nil {
		t.Fatal(err)
	}
	envID := "adopt-east"
	code, body = r.do(http.MethodPost, "/api/v1alpha1/environments?id="+envID, map[string]any{"kubeconfig": string(kc)})
	r.want(http.StatusCreated, code, body)
	r.eventually(time.Minute, "seven unadopted storage claims counted", func() bool {
		_, env := r.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
		return field(env, "status", "unadopted_volume_count") == float64(7)
	})
	code, body = r.do(http.MethodPost, volumesPath(envID)+"?id=own", map[string]any{"spec": storageSpec("own", "1Gi", nil)})
	r.want(http.StatusCreated, code, body)
	r.waitStatus(envID, "own", "RUNNING", time.Minute)
	before := claimVersions(t, east, ns)

	code, body = r.do(http.MethodPost, "/api/v1alpha1/environments/"+envID+":adopt", map[string]any{"namespace": "not-mine"})
	r.want(http.StatusBadRequest, code, body, "namespace")
	code, body = r.do(http.MethodPost, "/api/v1alpha1/environments/"+envID+":adopt", map[string]any{"namespace": ns, "surprise": 1})
	r.want(http.StatusBadRequest, code, body, "surprise")

	wantSkipped := map[string]string{
		"mislabelled":        `its label dcm.project/dcm-instance-id is "another-id", not its name`,
		"health":             "not a valid volume id",
		"dotted.name":        "not a valid volume id",
		"recorded-elsewhere": "recorded in environment " + westID,
	}
	// Adopted, to be looked at: a claim being deleted (so DCM's record of
	// it ends), one whose class is gone.
	wantWarnings := map[string]string{
		"leaving":   "adopted as DELETING",
		"classless": "its StorageClass retired-class does not exist",
	}
	for _, validateOnly := range []bool{true, false} {
		code, body = r.do(http.MethodPost, "/api/v1alpha1/environments/"+envID+":adopt", map[string]any{"namespace": ns, "validate_only": validateOnly})
		r.want(http.StatusOK, code, body)
		if got := adoptedIDs(body); !slices.Equal(got, []string{"classless", "good", "leaving"}) || body["recorded_count"] != float64(1) ||
			!slices.Equal(body["namespaces"].([]any), []any{ns}) {
			t.Fatalf("adopt (validate_only %v): %v", validateOnly, body)
		}
		warnings := body["warnings"].([]any)
		if len(warnings) != len(wantWarnings) {
			t.Fatalf("warnings %v, want %v", warnings, wantWarnings)
		}
		for _, w := range warnings {
			w := w.(map[string]any)
			if reason := wantWarnings[w["name"].(string)]; reason == "" || !strings.Contains(w["reason"].(string), reason) {
				t.Fatalf("warning %v; want it to say %q", w, reason)
			}
		}
		skipped := body["skipped"].([]any)
		if len(skipped) != len(wantSkipped) {
			t.Fatalf("skipped %v, want %v", skipped, wantSkipped)
		}
		for _, s := range skipped {
			s := s.(map[string]any)
			if reason := wantSkipped[s["name"].(string)]; reason == "" || s["namespace"] != ns || !strings.Contains(s["reason"].(string), reason) {
				t.Fatalf("skipped %v; want the reason to say %q", s, reason)
			}
		}
	}
	r.waitStatus(envID, "good", "PROVISIONING", 10*time.Second)
	stillExactly(t, r.stream, map[string][]string{"good": {"PROVISIONING"}, "leaving": {"DELETING"}, "classless": {"PROVISIONING"},
		"mislabelled": nil, "health": nil})
	_, env := r.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
	if field(env, "status", "unadopted_volume_count") != float64(4) {
		t.Fatalf("after adoption: %v", env["status"])
	}
	if after := claimVersions(t, east, ns); !maps.Equal(after, before) {
		t.Fatalf("adoption wrote to the cluster: claims %v before, %v after", before, after)
	}
	// The class is gone: the volume says so, and an expansion is refused
	// saying why.
	_, v := r.do(http.MethodGet, volumesPath(envID)+"/classless", nil)
	if msg, _ := v["status_message"].(string); !strings.Contains(msg, "its StorageClass retired-class does not exist") {
		t.Fatalf("the volume of a claim whose class is gone: %v", v)
	}
	code, body = r.do(http.MethodPatch, volumesPath(envID)+"/classless", map[string]any{"capacity": "2Gi"})
	r.want(http.StatusUnprocessableEntity, code, body, "StorageClass retired-class does not exist")
	// The claim being deleted goes: DCM hears DELETED, the volume is gone.
	if _, err := claimsAPI.Patch(t.Context(), "leaving", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`),
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually(time.Minute, "leaving DELETED", func() bool {
		return slices.Equal(natstest.For(r.stream.Events(), "leaving"), []string{"DELETING", "DELETED"})
	})
	code, body = r.do(http.MethodGet, volumesPath(envID)+"/leaving", nil)
	r.want(http.StatusNotFound, code, body)
	// Claims of one name in two of an environment's namespaces: a volume id
	// names one claim, so neither is adopted (east's two namespaces).
	eastID, eastNamespaces := east.Spec.Environment.ID, []string{east.Spec.Environment.Namespace, east.Spec.Environment.AllowedNamespaces[0]}
	for _, twinNS := range eastNamespaces {
		twin := peer("twin", "twin", "storage")
		twin.Namespace = twinNS
		if _, err := east.AdminClient().CoreV1().PersistentVolumeClaims(twinNS).Create(t.Context(), twin, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = east.AdminClient().CoreV1().PersistentVolumeClaims(twinNS).Delete(context.Background(), "twin", metav1.DeleteOptions{})
		})
	}
	r.eventually(time.Minute, "both twins skipped", func() bool {
		code, body := r.do(http.MethodPost, "/api/v1alpha1/environments/"+eastID+":adopt", map[string]any{"validate_only": true})
		twins := 0
		for _, s := range body["skipped"].([]any) {
			s := s.(map[string]any)
			if code == http.StatusOK && s["name"] == "twin" && strings.Contains(s["reason"].(string), "several of the environment's namespaces") {
				twins++
			}
		}
		return twins == 2 && !slices.Contains(adoptedIDs(body), "twin")
	})

	code, page := r.do(http.MethodGet, "/api/v1alpha1/audit-events?environment="+envID+"&action=adoptVolumes", nil)
	r.want(http.StatusOK, code, page)
	if events, _ := page["audit_events"].([]any); len(events) != 4 { // two refused, the dry run, the adoption
		t.Fatalf("adoption audit events: %v", page)
	}
}

// claimVersions maps each claim in a namespace to its resource version, as
// the cluster's admin sees them: equal maps mean nothing was written.
func claimVersions(t *testing.T, cluster *harness.Cluster, namespace string) map[string]string {
	t.Helper()
	list, err := cluster.AdminClient().CoreV1().PersistentVolumeClaims(namespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, pvc := range list.Items {
		out[pvc.Name] = pvc.ResourceVersion
	}
	return out
}

// adoptedIDs lists the ids of an adoption's volumes, in its order.
func adoptedIDs(adoption map[string]any) []string {
	var ids []string
	for _, v := range adoption["adopted"].([]any) {
		ids = append(ids, fmt.Sprint(v.(map[string]any)["id"]))
	}
	return ids
}

// volumeIDs lists the ids of a volume list's volumes, in its order.
func volumeIDs(list map[string]any) []string {
	var ids []string
	for _, v := range list["volumes"].([]any) {
		ids = append(ids, fmt.Sprint(v.(map[string]any)["id"]))
	}
	return ids
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}
