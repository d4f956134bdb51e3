package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/test/gatewaytest"
)

// TestPlacementMatchesWhatACreateAccepts asks the placement question on the
// two harness clusters (an environment each, on a namespace of its own,
// the west one under a storage quota) and holds its answers to what the
// volume API does: every candidate accepts the create it suggests; a class
// left out for a mode refuses that mode (422), a namespace left out for its
// quota refuses the size (409), and an environment left out because its
// cluster is cut refuses any create (503).
func TestPlacementMatchesWhatACreateAccepts(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	// register adds a tenant of cluster i in region and zone; west's (i 1)
	// namespace gets a quota with room for 3Gi.
	register := func(i int, region, zone string) string {
		cluster := clusters[i]
		tenants, err := cluster.Tenants(t.Context(), "place", 1)
		if err != nil {
			t.Fatal(err)
		}
		ns := tenants[0].Namespace
		if i == 1 {
			// Room for 3Gi more: the quota is listed when the environment connects.
			quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "storage", Namespace: ns},
				Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("3Gi")}}}
			if _, err := cluster.AdminClient().CoreV1().ResourceQuotas(ns).Create(t.Context(), quota, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			c.eventually(time.Minute, "the quota's usage computed", func() bool {
				q, err := cluster.AdminClient().CoreV1().ResourceQuotas(ns).Get(t.Context(), "storage", metav1.GetOptions{})
				return err == nil && q.Status.Hard != nil
			})
		}
		kc, err := cluster.TenantKubeconfig(tenants[0])
		if err != nil {
			t.Fatal(err)
		}
		id := "place-" + cluster.Name()
		code, body := c.do(http.MethodPost, "/api/v1alpha1/environments?id="+id, map[string]any{"kubeconfig": string(kc), "region": region, "zone": zone})
		c.want(http.StatusCreated, code, body)
		return id
	}
	eastID, westID := register(0, "eu", "eu-1"), register(1, "us", "us-1")

	type exclusion struct {
		EnvironmentID string `json:"environment_id"`
		StorageClass  string `json:"storage_class"`
		Reason        string `json:"reason"`
	}
	type placement struct {
		Candidates []struct {
			EnvironmentID   string `json:"environment_id"`
			StorageClass    string `json:"storage_class"`
			CapabilityKnown bool   `json:"capability_known"`
			Quota           *struct {
				HeadroomBytes int64 `json:"headroom_bytes"`
			} `json:"quota"`
		} `json:"candidates"`
		Excluded []exclusion `json:"excluded"`
	}
	ask := func(query url.Values) placement {
		t.Helper()
		query.Set("explain", "true")
		var p placement
		code, body := c.do(http.MethodGet, "/api/v1alpha1/placements?"+query.Encode(), nil)
		c.want(http.StatusOK, code, body)
		raw, err := json.Marshal(body) // again, into the typed view
		if err == nil {
			err = json.Unmarshal(raw, &p)
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	create := func(env, class, mode, capacity string) (int, map[string]any) {
		t.Helper()
		hints := map[string]any{"storage_class": class}
		if mode != "" {
			hints["access_mode"] = mode
		}
		return c.do(http.MethodPost, volumesPath(env)+"?id="+uuid.NewString(), map[string]any{"spec": storageSpec("placed", capacity, hints)})
	}
	// Both connected, classes and quota listed.
	var rwx placement
	c.eventually(time.Minute, "both environments placeable", func() bool {
		rwx = ask(url.Values{"capacity": {"1Gi"}, "access_mode": {"ReadWriteMany"}})
		seen := map[string]bool{}
		for _, cand := range rwx.Candidates {
			seen[cand.EnvironmentID] = true
		}
		return seen[eastID] && seen[westID]
	})
	// Known RWX classes first: shared-files (east) and efs (west).
	known := map[string]bool{}
	for _, cand := range rwx.Candidates {
		if cand.CapabilityKnown {
			known[cand.EnvironmentID+"/"+cand.StorageClass] = true
		}
	}
	if !known[eastID+"/shared-files"] || !known[westID+"/efs"] || len(known) != 2 || !rwx.Candidates[0].CapabilityKnown || !rwx.Candidates[1].CapabilityKnown {
		t.Fatalf("RWX candidates: %+v", rwx.Candidates)
	}
	for _, cand := range rwx.Candidates {
		if code, body := create(cand.EnvironmentID, cand.StorageClass, "ReadWriteMany", "1Gi"); code != http.StatusCreated {
			t.Errorf("candidate %s/%s refused the create: %d %v", cand.EnvironmentID, cand.StorageClass, code, body)
		}
	}
	refusedModes := 0
	for _, ex := range rwx.Excluded {
		if strings.HasPrefix(ex.Reason, "supports ") {
			refusedModes++
			code, body := create(ex.EnvironmentID, ex.StorageClass, "ReadWriteMany", "1Gi")
			c.want(http.StatusUnprocessableEntity, code, body, "access_mode")
		}
	}
	if refusedModes < 4 {
		t.Fatalf("only %d classes left out for their modes: %+v", refusedModes, rwx.Excluded)
	}

	// Snapshots: the CSI plugins' classes, each with a VolumeSnapshotClass
	// for its driver; every other class is known not to be snapshottable.
	snap := ask(url.Values{"capacity": {"1Gi"}, "snapshots": {"true"}})
	var offered []string
	for _, cand := range snap.Candidates {
		offered = append(offered, cand.EnvironmentID+"/"+cand.StorageClass)
		if !cand.CapabilityKnown {
			t.Errorf("snapshot candidate %s/%s flagged unknown", cand.EnvironmentID, cand.StorageClass)
		}
	}
	slices.Sort(offered)
	if want := []string{eastID + "/snapshots", westID + "/csi-hostpath"}; !slices.Equal(offered, want) {
		t.Fatalf("snapshottable candidates %v, want %v", offered, want)
	}
	if !slices.ContainsFunc(snap.Excluded, func(ex exclusion) bool {
		return ex.EnvironmentID == eastID && ex.StorageClass == "standard" && strings.Contains(ex.Reason, "cannot be snapshotted")
	}) {
		t.Fatalf("east's standard not left out as unsnapshottable: %+v", snap.Excluded)
	}

	// 5Gi: more than west's quota leaves (3Gi, 2Gi once the RWX volume
	// above is counted) — its classes are left out, and a create is refused.
	var big placement
	c.eventually(time.Minute, "west's quota usage listed again after the create", func() bool {
		big = ask(url.Values{"capacity": {"2Gi"}, "region": {"us"}})
		for _, cand := range big.Candidates {
			if cand.Quota == nil || cand.Quota.HeadroomBytes != 2<<30 {
				return false
			}
		}
		return len(big.Candidates) > 0
	})
	big = ask(url.Values{"capacity": {"5Gi"}})
	for _, cand := range big.Candidates {
		if cand.EnvironmentID == westID {
			t.Fatalf("west offered for 5Gi under a 3Gi quota: %+v", cand)
		}
		if code, body := create(cand.EnvironmentID, cand.StorageClass, "", "5Gi"); code != http.StatusCreated {
			t.Errorf("candidate %s/%s refused 5Gi: %d %v", cand.EnvironmentID, cand.StorageClass, code, body)
		}
	}
	quotaRefusals := 0
	for _, ex := range big.Excluded {
		if ex.EnvironmentID == westID && strings.Contains(ex.Reason, "ResourceQuota") {
			quotaRefusals++
		}
	}
	if quotaRefusals == 0 {
		t.Fatalf("5Gi: nothing of west left out for its quota: %+v", big.Excluded)
	}
	code, body := create(westID, "gp3", "", "5Gi")
	c.want(http.StatusConflict, code, body, "ResourceQuota")

	// A cut cluster's environment is left out, and refuses creates.
	east.SetReachable(false)
	defer east.SetReachable(true)
	c.eventually(time.Minute, "the cut environment left out", func() bool {
		p := ask(url.Values{"capacity": {"1Gi"}})
		for _, ex := range p.Excluded {
			if ex.EnvironmentID == eastID && ex.StorageClass == "" {
				return true
			}
		}
		return false
	})
	code, body = create(eastID, "standard", "", "1Gi")
	c.want(http.StatusServiceUnavailable, code, body)
	east.SetReachable(true)
}
