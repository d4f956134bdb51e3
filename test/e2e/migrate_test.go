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

	spmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/provider"
	rmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/resource_manager"
	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/storagesp"
)

// TestMigrateFromTheStorageSP moves a site from DCM's per-cluster storage
// provider onto the gateway as the operator's manual says, against DCM's
// real service-provider-manager and a stand-in that behaves as the provider
// does (its claims, its refusals, its status events, its registration at
// every start), through every edge of the cut-over:
//   - the environment first serves the wrong namespace: the dry run names
//     DCM's instances it has no claim for, registration under the
//     provider's name is refused (BLOCKED) and DCM keeps pointing at the
//     provider, so nothing is orphaned; serving the right namespace, the
//     claims are counted, and registration stays refused until they are
//     adopted;
//   - adoption (dry run first) reports each volume's status once, a
//     capacity in bytes and a dcm.project/ label included;
//   - DCM deletes an instance between adoption and the provider's stop:
//     the provider deletes the claim, the gateway reports it gone;
//   - the gateway takes over the provider's name; the same instances are
//     read, expanded and deleted through DCM and the gateway, and a new one
//     (in bytes, with a dcm.project/ label) lands on the gateway;
//   - the provider comes back and registers its name again: the gateway
//     takes it back within a minute, saying who held it and since when.
func TestMigrateFromTheStorageSP(t *testing.T) {
	t.Parallel()
	site := startDCMSite(t, gatewaytest.Options{})
	c, g, providers, instances := site.client, site.gateway, site.providers, site.instances
	east := clusters[0]
	// Namespaces of their own: a run never finds an earlier run's claims.
	tenants, err := east.Tenants(t.Context(), "migrate-"+uuid.NewString()[:8], 2)
	if err != nil {
		t.Fatal(err)
	}
	ns, wrongNS := tenants[0].Namespace, tenants[1].Namespace
	envID := "migrate-east"
	gw, sp := site.stream.From(envID), site.stream.From("")

	// The site before: the provider, registered in DCM, with instances.
	old := storagesp.Start(t, storagesp.Options{Name: "k8s-storage-sp-east", DCMURL: site.spmURL, NATSURL: site.natsURL,
		Client: east.AdminClient(), Namespace: ns})
	provider := func() (id, endpoint, health string) {
		list, err := providers.ListProvidersWithResponse(t.Context(), &spmapi.ListProvidersParams{})
		if err != nil || list.JSON200 == nil || list.JSON200.Providers == nil {
			return "", "", ""
		}
		for _, p := range *list.JSON200.Providers {
			if p.Name == old.Name {
				return *p.Id, p.Endpoint, ptr.Deref(p.HealthStatus, "")
			}
		}
		return "", "", ""
	}
	c.eventually(time.Minute, "the provider ready in DCM", func() bool { _, e, h := provider(); return e == old.Endpoint && h == "ready" })
	providerID, _, _ := provider()
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
	// The provider names each claim by the instance's spec.metadata.name,
	// which must equal its id.
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()}
	slices.Sort(ids) // the order the gateway lists them in
	grow, drop, keep, bytes := ids[0], ids[1], ids[2], ids[3]
	createInstance(grow, storageSpec(grow, "1Gi", map[string]any{"storage_class": "standard"}))
	createInstance(drop, storageSpec(drop, "2Gi", nil)) // the cluster's default class
	createInstance(keep, storageSpec(keep, "1Gi", map[string]any{"storage_class": "standard", "access_mode": "ReadWriteOnce"}))
	inBytes := storageSpec(bytes, "1073741824", map[string]any{"storage_class": "standard"})
	inBytes["metadata"].(map[string]any)["labels"] = map[string]string{"dcm.project/cost-center": "r-and-d"}
	createInstance(bytes, inBytes)
	for _, id := range ids {
		c.eventually(time.Minute, "the provider reporting "+id+" RUNNING", func() bool {
			got := natstest.For(sp.Events(), id)
			return len(got) > 0 && got[len(got)-1] == "RUNNING" && instanceStatus(id) == "RUNNING"
		})
	}
	before := claimVersions(t, east, ns)

	// 1. Register the environment under the provider's name, registration
	// off — but serving another namespace than the provider's.
	register := func(tenant harness.Tenant) {
		t.Helper()
		kc, err := east.TenantKubeconfig(tenant)
		if err != nil {
			t.Fatal(err)
		}
		code, body := c.do(http.MethodPost, "/api/v1alpha1/environments?id="+envID, map[string]any{
			"kubeconfig": string(kc), "dcm": map[string]any{"register": false, "provider_name": old.Name},
		})
		c.want(http.StatusCreated, code, body)
	}
	register(tenants[1])
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
	withoutClaim := func(adoption map[string]any) []string {
		var out []string
		list, _ := adoption["dcm_instances_without_claim"].([]any)
		for _, in := range list {
			out = append(out, in.(map[string]any)["id"].(string))
		}
		slices.Sort(out)
		return out
	}
	var dry map[string]any
	c.eventually(time.Minute, "the dry run naming DCM's instances without a claim", func() bool {
		var code int
		code, dry = c.do(http.MethodPost, "/api/v1alpha1/environments/"+envID+":adopt", map[string]any{"validate_only": true})
		return code == http.StatusOK && dry["dcm_check"] == nil && slices.Equal(withoutClaim(dry), ids)
	})
	if len(dry["adopted"].([]any)) != 0 || !slices.Equal(dry["namespaces"].([]any), []any{wrongNS}) {
		t.Fatalf("dry run in the wrong namespace: %v", dry)
	}
	// Turning registration on is refused: DCM keeps the provider, nothing
	// is orphaned.
	setRegister := func(on bool) map[string]any {
		t.Helper()
		code, body := c.do(http.MethodPatch, "/api/v1alpha1/environments/"+envID, map[string]any{"dcm": map[string]any{"register": on}},
			"Content-Type", "application/merge-patch+json")
		c.want(http.StatusOK, code, body)
		return body
	}
	env := setRegister(true)
	if field(env, "status", "dcm_registration", "state") != "BLOCKED" || field(env, "status", "dcm_registration", "instances_without_claim") != float64(len(ids)) ||
		!strings.Contains(field(env, "status", "dcm_registration", "message").(string), keep) {
		t.Fatalf("registration under the provider's name with its instances unserved: %v", env["status"])
	}
	if id, endpoint, _ := provider(); id != providerID || endpoint != old.Endpoint {
		t.Fatalf("DCM's provider moved (%s, %s) although the take-over was refused", id, endpoint)
	}
	if instanceStatus(keep) != "RUNNING" {
		t.Fatalf("DCM lost instance %s", keep)
	}
	// The right namespace: the claims are counted, not served, and the
	// take-over still waits for their adoption.
	setRegister(false)
	code, body := c.do(http.MethodDelete, "/api/v1alpha1/environments/"+envID, nil)
	c.want(http.StatusNoContent, code, body)
	register(tenants[0])
	c.eventually(time.Minute, "the provider's claims counted, not served", func() bool {
		_, env := c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
		return field(env, "status", "unadopted_volume_count") == float64(len(ids)) && field(env, "status", "volume_count") == float64(0)
	})
	if env = setRegister(true); field(env, "status", "dcm_registration", "state") != "BLOCKED" ||
		!strings.Contains(field(env, "status", "dcm_registration", "message").(string), "not adopted yet") {
		t.Fatalf("registration before adoption: %v", env["status"])
	}
	setRegister(false)
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
	dry = adopt(map[string]any{"validate_only": true})
	if got := adoptedIDs(dry); !slices.Equal(got, ids) || len(dry["skipped"].([]any)) != 0 || dry["recorded_count"] != float64(0) ||
		dry["validate_only"] != true || len(withoutClaim(dry)) != 0 {
		t.Fatalf("dry run: %v", dry)
	}
	for _, v := range dry["adopted"].([]any) {
		v := v.(map[string]any)
		if v["status"] != "RUNNING" || field(v, "spec", "metadata", "namespace") != ns || field(v, "spec", "metadata", "name") != v["id"] ||
			field(v, "spec", "metadata", "storage_class") != "standard" && v["id"] != drop {
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
		waitEvents(t, gw, id, want[id], time.Minute)
	}
	// As DCM's contract writes them: a capacity in bytes, a dcm.project/ label.
	_, v := c.do(http.MethodGet, volumesPath(envID)+"/"+bytes, nil)
	if field(v, "spec", "capacity") != "1073741824" || field(v, "spec", "metadata", "labels", "dcm.project/cost-center") != "r-and-d" {
		t.Fatalf("the adopted volume in bytes with a dcm.project/ label: %v", v)
	}
	_, env = c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
	if field(env, "status", "unadopted_volume_count") != float64(0) || field(env, "status", "volume_count") != float64(len(ids)) {
		t.Fatalf("after adoption the environment shows %v", env["status"])
	}
	again := adopt(nil)
	if len(again["adopted"].([]any)) != 0 || again["recorded_count"] != float64(len(ids)) {
		t.Fatalf("adopting again: %v", again)
	}
	stillExactly(t, gw, want)
	if after := claimVersions(t, east, ns); !maps.Equal(after, before) {
		t.Fatalf("adoption wrote to the cluster: claims %v before, %v after", before, after)
	}

	// DCM deletes an instance before the provider stops: the provider
	// deletes the claim; the gateway, which adopted it, reports it gone.
	deleted, err := instances.DeleteInstanceWithResponse(t.Context(), drop, &rmapi.DeleteInstanceParams{})
	if err != nil || deleted.StatusCode() >= 300 {
		t.Fatalf("delete instance %s through DCM: %v %d %s", drop, err, deleted.StatusCode(), deleted.Body)
	}
	c.eventually(time.Minute, "the deleted instance's claim gone", func() bool { return claims(t, east, ns, drop) == 0 })
	want[drop] = []string{"RUNNING", "DELETING", "DELETED"}
	waitEvents(t, gw, drop, want[drop], time.Minute)
	code, body = c.do(http.MethodGet, volumesPath(envID)+"/"+drop, nil)
	c.want(http.StatusNotFound, code, body)

	// 3. Stop the provider; 4. turn registration on: every instance DCM
	// holds is served, so the gateway takes the provider's name.
	old.Stop()
	adopt(nil)
	env = setRegister(true)
	if field(env, "status", "dcm_registration", "state") != "REGISTERED" || field(env, "status", "dcm_registration", "provider_id") != providerID ||
		field(env, "status", "dcm_registration", "instances_without_claim") != float64(0) {
		t.Fatalf("the take-over: %v", env["status"])
	}
	c.eventually(time.Minute, "DCM's provider pointing at the gateway, ready", func() bool {
		id, endpoint, health := provider()
		return id == providerID && endpoint == g.URL+volumesPath(envID) && health == "ready"
	})

	// The same instances, through DCM and the gateway.
	if got := instanceStatus(keep); got != "RUNNING" {
		t.Fatalf("DCM reads %s as %q", keep, got)
	}
	code, body = c.do(http.MethodPatch, volumesPath(envID)+"/"+grow, map[string]any{"capacity": "2Gi"})
	c.want(http.StatusOK, code, body)
	c.waitStatus(envID, grow, "RUNNING", time.Minute, "2Gi")
	want[grow] = []string{"RUNNING", "PROVISIONING", "RUNNING"}
	waitEvents(t, gw, grow, want[grow], time.Minute)
	// A new instance under the provider's name is the gateway's — in
	// bytes, with a dcm.project/ label, as DCM's contract allows.
	fresh := uuid.NewString()
	freshSpec := storageSpec("after-cut-over", "1073741824", nil)
	freshSpec["metadata"].(map[string]any)["labels"] = map[string]string{"dcm.project/cost-center": "r-and-d"}
	createInstance(fresh, freshSpec)
	c.waitStatus(envID, fresh, "RUNNING", time.Minute)
	c.eventually(time.Minute, "DCM's record of the new instance RUNNING", func() bool { return instanceStatus(fresh) == "RUNNING" })
	want[fresh] = []string{"PROVISIONING", "RUNNING"}
	if got := natstest.For(gw.Events(), fresh); slices.Equal(got, []string{"PROVISIONING", "RUNNING", "RUNNING"}) {
		// DCM dropped RUNNING, which came before it stored the record; the
		// gateway sent it again (TestDCMRecordCatchesUpWithTheEventsItDropped).
		want[fresh] = got
	}
	stillExactly(t, gw, want)
	code, body = c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID+"/volumes", nil)
	c.want(http.StatusOK, code, body)
	if got := volumeIDs(body); !slices.Equal(got, sorted(grow, keep, bytes, fresh)) {
		t.Fatalf("the environment lists %v, want %v", got, sorted(grow, keep, bytes, fresh))
	}

	// The provider comes back: it registers its name again, DCM points the
	// name at it, and the gateway takes it back within a minute.
	old.Restart()
	c.eventually(time.Minute, "the provider's name taken back", func() bool {
		_, env := c.do(http.MethodGet, "/api/v1alpha1/environments/"+envID, nil)
		id, endpoint, _ := provider()
		return id == providerID && endpoint == g.URL+volumesPath(envID) &&
			field(env, "status", "dcm_registration", "displaced_by") == old.Endpoint &&
			field(env, "status", "dcm_registration", "reclaim_time") != nil
	})
	code, page := c.do(http.MethodGet, "/api/v1alpha1/audit-events?environment="+envID+"&action=reclaimDCMProvider", nil)
	c.want(http.StatusOK, code, page)
	if events, _ := page["audit_events"].([]any); len(events) == 0 || field(events[0].(map[string]any), "auth_method") != "gateway" {
		t.Fatalf("no audit record of the take-back: %v", page)
	}
	if !scrape(t, c).has("storage_gateway_environment_dcm_provider_reclaim_time_seconds", "environment", envID) {
		t.Fatal("no metric of the take-back")
	}
	// Once more, and an admin's verify takes the name back at once.
	old.Stop()
	old.Restart()
	c.eventually(time.Minute, "the provider registered again", func() bool { _, endpoint, _ := provider(); return endpoint == old.Endpoint })
	verified := time.Now()
	code, body = c.do(http.MethodPost, "/api/v1alpha1/environments/"+envID+":verify", nil)
	c.want(http.StatusOK, code, body)
	reclaimed, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(field(body, "status", "dcm_registration", "reclaim_time")))
	if _, endpoint, _ := provider(); endpoint != g.URL+volumesPath(envID) || field(body, "status", "dcm_registration", "state") != "REGISTERED" ||
		reclaimed.Before(verified) {
		t.Fatalf("verify did not take the name back: DCM points at %s; %v (verified at %s)", endpoint, body["status"], verified)
	}
	old.Stop()
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
