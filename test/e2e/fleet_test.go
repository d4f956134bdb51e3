package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// fleetClass is one entry of GET /storage-classes.
type fleetClass struct {
	Name         string         `json:"name"`
	Summary      fleet.Summary  `json:"summary"`
	Environments []fleet.Detail `json:"environments"`
}

// storageClasses queries the fleet view (every page) and returns its entries
// by class name.
func (c client) storageClasses(query url.Values) map[string]fleetClass {
	c.t.Helper()
	out := map[string]fleetClass{}
	for token := ""; ; {
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		q.Set("max_page_size", "3")
		if token != "" {
			q.Set("page_token", token)
		}
		var page struct {
			StorageClasses []fleetClass `json:"storage_classes"`
			NextPageToken  string       `json:"next_page_token"`
		}
		c.getJSON("/api/v1alpha1/storage-classes?"+q.Encode(), &page)
		for _, fc := range page.StorageClasses {
			out[fc.Name] = fc
		}
		if token = page.NextPageToken; token == "" {
			return out
		}
	}
}

// getJSON GETs path, expects 200 and decodes the body into v.
func (c client) getJSON(path string, v any) {
	c.t.Helper()
	code, body := c.do(http.MethodGet, path, nil)
	if code != http.StatusOK {
		c.t.Fatalf("GET %s: %d %v", path, code, body)
	}
	raw, _ := json.Marshal(body)
	if err := json.Unmarshal(raw, v); err != nil {
		c.t.Fatal(err)
	}
}

// detailIn returns the entry's detail for one environment.
func detailIn(t *testing.T, fc fleetClass, envID string) fleet.Detail {
	t.Helper()
	for _, d := range fc.Environments {
		if d.EnvironmentID == envID {
			return d
		}
	}
	t.Fatalf("class %s: no detail for %s in %+v", fc.Name, envID, fc.Environments)
	return fleet.Detail{}
}

func names(m map[string]fleetClass) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// waitLive waits until the fleet view shows every class of envs as live.
func (c client) waitLive(envs ...string) {
	c.t.Helper()
	c.eventually(30*time.Second, "live fleet data for "+fmt.Sprint(envs), func() bool {
		for _, id := range envs {
			var ec fleet.EnvironmentClasses
			c.getJSON("/api/v1alpha1/environments/"+id+"/storage-classes", &ec)
			if ec.Stale || len(ec.Classes) == 0 {
				return false
			}
		}
		return true
	})
}

// liveFleet starts a gateway with both harness clusters registered and
// their fleet data live, and returns an admin's client of it.
func liveFleet(t *testing.T) client {
	t.Helper()
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	c.register(clusters[0])
	c.register(clusters[1])
	c.waitLive(clusters[0].Spec.Environment.ID, clusters[1].Spec.Environment.ID)
	return c
}

// TestFleetStorageClasses: the two harness clusters differ on purpose (see
// environments/local-*.yaml); the fleet view aggregates them by class name,
// filters, shows CSIDriver facts and published capacity, follows changes in
// the clusters and the environments' overrides, and the volume API
// validates against the same capabilities.
func TestFleetStorageClasses(t *testing.T) {
	c := liveFleet(t)
	east, west := clusters[0], clusters[1]
	eastID, westID := east.Spec.Environment.ID, west.Spec.Environment.ID

	all := c.storageClasses(nil)
	t.Run("one entry per class name across environments", func(t *testing.T) {
		want := []string{"archive", "block", "broken", "csi-hostpath", "efs", "flaky", "gp3", "io2-block", "shared-files", "slow", "snapshots", "standard", "standard-wffc"}
		if got := names(all); !slices.Equal(got, want) {
			t.Fatalf("classes = %v, want %v", got, want)
		}
		std := all["standard"]
		s := std.Summary
		if s.EnvironmentCount != 2 || s.DefaultCount != 1 || s.Expandable != "somewhere" || s.StaleEnvironmentCount != 0 ||
			!slices.Equal(s.Provisioners, []string{"disk.csi.local.dev", "ebs.csi.aws.com"}) ||
			!slices.Equal(s.AccessModes, []string{"ReadWriteOnce", "ReadWriteOncePod"}) {
			t.Errorf("standard summary = %+v", s)
		}
		if e, w := detailIn(t, std, eastID), detailIn(t, std, westID); !e.IsDefault || w.IsDefault ||
			!e.AllowVolumeExpansion || w.AllowVolumeExpansion || e.Region != "local" {
			t.Errorf("standard east %+v, west %+v", e, w)
		}
		if s := all["standard-wffc"].Summary; s.Expandable != "everywhere" || s.EnvironmentCount != 2 || s.UnknownCapabilityCount != 1 {
			t.Errorf("standard-wffc summary = %+v", s)
		}
		if d := detailIn(t, all["standard-wffc"], westID); d.VolumeBindingMode != "WaitForFirstConsumer" {
			t.Errorf("standard-wffc west binding mode %s", d.VolumeBindingMode)
		}
		if s := all["archive"].Summary; s.Expandable != "nowhere" || s.EnvironmentCount != 1 {
			t.Errorf("archive summary = %+v", s)
		}
		if d := detailIn(t, all["archive"], eastID); d.ReclaimPolicy != "Retain" {
			t.Errorf("archive reclaim policy %s", d.ReclaimPolicy)
		}
	})
	t.Run("capabilities name their source", func(t *testing.T) {
		e := detailIn(t, all["standard"], eastID)
		if !slices.Equal(e.AccessModes, []string{"ReadWriteOnce", "ReadWriteOncePod"}) || e.CapabilitySource.AccessModes != "annotation" {
			t.Errorf("east standard: %v from %s", e.AccessModes, e.CapabilitySource.AccessModes)
		}
		if w := detailIn(t, all["efs"], westID); !slices.Contains(w.AccessModes, "ReadWriteMany") || w.CapabilitySource.AccessModes != "driver" {
			t.Errorf("west efs: %v from %s", w.AccessModes, w.CapabilitySource.AccessModes)
		}
		if u := detailIn(t, all["archive"], eastID); u.AccessModes != nil || u.CapabilitySource.AccessModes != "unknown" {
			t.Errorf("east archive: %v from %s", u.AccessModes, u.CapabilitySource.AccessModes)
		}
	})
	t.Run("secret-looking parameters are never shown", func(t *testing.T) {
		e := detailIn(t, all["standard"], eastID)
		if want := map[string]string{"type": "ssd"}; !maps.Equal(e.Parameters, want) {
			t.Errorf("east standard parameters = %v, want %v", e.Parameters, want)
		}
	})
	t.Run("CSIDriver facts", func(t *testing.T) {
		e := detailIn(t, all["standard"], eastID).CSIDriver
		if e == nil || !*e.AttachRequired || !*e.StorageCapacity || e.FSGroupPolicy != "ReadWriteOnceWithFSType" ||
			!slices.Equal(e.VolumeLifecycleModes, []string{"Persistent"}) {
			t.Errorf("east disk driver facts %+v", e)
		}
		if w := detailIn(t, all["efs"], westID).CSIDriver; w == nil || *w.AttachRequired || w.FSGroupPolicy != "None" {
			t.Errorf("west efs driver facts %+v", w)
		}
	})
	t.Run("capacity per class and topology segment", func(t *testing.T) {
		capacity := detailIn(t, all["standard"], eastID).Capacity
		if capacity == nil || capacity.Total != "3Ti" || len(capacity.Segments) != 2 ||
			capacity.Segments[0].Topology != "topology.kubernetes.io/zone=east-a" || capacity.Segments[0].Capacity != "2Ti" ||
			capacity.Segments[0].MaximumVolumeSize != "500Gi" || capacity.Segments[1].Capacity != "1Ti" {
			t.Errorf("east standard capacity %+v", capacity)
		}
		if s := all["standard"].Summary.Capacity; s == nil || s.Total != "3Ti" {
			t.Errorf("standard summary capacity %+v (west publishes none)", s)
		}
		if w := detailIn(t, all["gp3"], westID).Capacity; w != nil {
			t.Errorf("west gp3 publishes no capacity but shows %+v", w)
		}
	})

	t.Run("snapshot classes, tiers and clone classes of each class's driver", func(t *testing.T) {
		for _, tt := range []struct {
			env, class      string
			snapshots       capabilities.Support
			snapshotClasses []string
			tiers           []string
		}{
			{eastID, "snapshots", capabilities.Supported, []string{"snapshots"}, []string{"gold", "platinum", "silver"}},
			{eastID, "standard", capabilities.Unsupported, nil, []string{}},
			{westID, "csi-hostpath", capabilities.Supported, []string{"csi-hostpath-snapclass"}, []string{"standard-tier"}},
		} {
			d := detailIn(t, all[tt.class], tt.env)
			if d.Snapshots != tt.snapshots || !slices.Equal(d.SnapshotClasses, tt.snapshotClasses) || d.Tiers == nil || !slices.Equal(d.Tiers, tt.tiers) {
				t.Errorf("%s in %s: snapshots %s through %v, tiers %#v; want %s through %v, tiers %v",
					tt.class, tt.env, d.Snapshots, d.SnapshotClasses, d.Tiers, tt.snapshots, tt.snapshotClasses, tt.tiers)
			}
			// The plugin classes are their drivers' only ones: a clone of
			// one of their volumes is made in the same class.
			if tt.snapshots == capabilities.Supported && !slices.Equal(d.CloneClasses, []string{tt.class}) {
				t.Errorf("%s in %s: clone classes %v, want [%s]", tt.class, tt.env, d.CloneClasses, tt.class)
			}
		}
	})

	t.Run("filters", func(t *testing.T) {
		tests := []struct {
			query url.Values
			want  []string
		}{
			{url.Values{"provisioner": {"efs.csi.aws.com"}}, []string{"efs"}},
			{url.Values{"access_mode": {"ReadWriteMany"}}, []string{"efs", "shared-files"}},
			{url.Values{"is_default": {"true"}}, []string{"gp3", "standard"}},
			{url.Values{"expandable": {"false"}}, []string{"archive", "broken", "standard"}},
			{url.Values{"environment": {eastID}, "volume_mode": {"Block"}}, []string{"block"}},
			{url.Values{"environment": {westID}, "expandable": {"true"}, "volume_mode": {"Block"}}, []string{"csi-hostpath", "gp3", "io2-block", "slow", "standard-wffc"}},
			{url.Values{"region": {"nowhere"}}, nil},
			{url.Values{"snapshots": {"true"}}, []string{"csi-hostpath", "snapshots"}},
			{url.Values{"tier": {"gold"}}, []string{"snapshots"}},
			{url.Values{"environment": {westID}, "snapshots": {"false"}}, []string{"efs", "gp3", "io2-block", "slow", "standard", "standard-wffc"}},
		}
		for _, tt := range tests {
			if got := names(c.storageClasses(tt.query)); !slices.Equal(got, tt.want) {
				t.Errorf("%v: classes %v, want %v", tt.query, got, tt.want)
			}
		}
		if d := c.storageClasses(url.Values{"expandable": {"false"}})["standard"]; len(d.Environments) != 1 || d.Environments[0].EnvironmentID != westID {
			t.Errorf("expandable=false shows standard in %+v, want only west", d.Environments)
		}
		code, body := c.do(http.MethodGet, "/api/v1alpha1/storage-classes?access_mode=ReadWriteSometimes", nil)
		c.want(http.StatusBadRequest, code, body, "access_mode")
	})

	t.Run("region filter follows the registry", func(t *testing.T) {
		code, body := c.do(http.MethodPatch, "/api/v1alpha1/environments/"+westID, map[string]any{"region": "far-west"})
		c.want(http.StatusOK, code, body)
		c.eventually(10*time.Second, "west in region far-west", func() bool {
			got := c.storageClasses(url.Values{"region": {"far-west"}})
			return slices.Equal(names(got), []string{"csi-hostpath", "efs", "gp3", "io2-block", "slow", "standard", "standard-wffc"}) &&
				detailIn(t, got["gp3"], westID).Region == "far-west"
		})
	})

	t.Run("one environment", func(t *testing.T) {
		var ec fleet.EnvironmentClasses
		c.getJSON("/api/v1alpha1/environments/"+westID+"/storage-classes", &ec)
		if ec.EnvironmentID != westID || ec.Stale || len(ec.Classes) != 7 {
			t.Fatalf("west classes = %+v", ec)
		}
		var d fleet.Detail
		c.getJSON("/api/v1alpha1/environments/"+westID+"/storage-classes/gp3", &d)
		if d.Name != "gp3" || d.Provisioner != "ebs.csi.aws.com" || !d.IsDefault || d.Parameters["type"] != "gp3" {
			t.Fatalf("west gp3 = %+v", d)
		}
		code, body := c.do(http.MethodGet, "/api/v1alpha1/environments/"+westID+"/storage-classes/archive", nil)
		c.want(http.StatusNotFound, code, body, "archive")
		code, body = c.do(http.MethodGet, "/api/v1alpha1/environments/nowhere/storage-classes", nil)
		c.want(http.StatusNotFound, code, body, "nowhere")
	})

	t.Run("follows the cluster", func(t *testing.T) {
		ctx := t.Context()
		capacities := west.AdminClient().StorageV1().CSIStorageCapacities("kube-system")
		qty := resource.MustParse("750Gi")
		_, err := capacities.Create(ctx, &storagev1.CSIStorageCapacity{
			ObjectMeta: metav1.ObjectMeta{Name: "gp3-west-a"}, StorageClassName: "gp3", Capacity: &qty,
			NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "west-a"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		classes := west.AdminClient().StorageV1().StorageClasses()
		_, err = classes.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fleet-new"}, Provisioner: "efs.csi.aws.com"}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.eventually(10*time.Second, "the new capacity and class in the fleet view", func() bool {
			got := c.storageClasses(url.Values{"environment": {westID}})
			gp3 := detailIn(t, got["gp3"], westID)
			_, added := got["fleet-new"]
			return added && gp3.Capacity != nil && gp3.Capacity.Total == "750Gi"
		})
		if err := capacities.Delete(ctx, "gp3-west-a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := classes.Delete(ctx, "fleet-new", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c.eventually(10*time.Second, "the capacity and class gone from the fleet view", func() bool {
			got := c.storageClasses(url.Values{"environment": {westID}})
			_, still := got["fleet-new"]
			return !still && detailIn(t, got["gp3"], westID).Capacity == nil
		})
	})

	t.Run("environment overrides", func(t *testing.T) {
		path := "/api/v1alpha1/environments/" + eastID
		code, body := c.do(http.MethodPatch, path, map[string]any{"capability_overrides": map[string]any{
			"provisioners":    map[string]any{"disk.csi.local.dev": map[string]any{"access_modes": []string{"ReadWriteOnce"}}},
			"storage_classes": map[string]any{"archive": map[string]any{"access_modes": []string{"ReadWriteOnce", "ReadOnlyMany"}, "volume_modes": []string{"Filesystem"}}},
		}})
		c.want(http.StatusOK, code, body)
		if field(body, "capability_overrides", "provisioners", "disk.csi.local.dev", "access_modes") == nil {
			t.Fatalf("the environment does not show its overrides: %v", body)
		}
		c.eventually(10*time.Second, "overrides in the fleet view", func() bool {
			got := c.storageClasses(url.Values{"environment": {eastID}})
			wffc, archive, std := detailIn(t, got["standard-wffc"], eastID), detailIn(t, got["archive"], eastID), detailIn(t, got["standard"], eastID)
			return slices.Equal(wffc.AccessModes, []string{"ReadWriteOnce"}) && wffc.CapabilitySource.AccessModes == "environment" &&
				slices.Equal(archive.AccessModes, []string{"ReadWriteOnce", "ReadOnlyMany"}) && archive.CapabilitySource.VolumeModes == "environment" &&
				std.CapabilitySource.AccessModes == "annotation" // the class's own annotation still wins
		})
		// The volume API validates against the same model.
		code, body = c.do(http.MethodPost, volumesPath(eastID)+"?id="+uuid.NewString(),
			map[string]any{"spec": storageSpec("shared", "1Gi", map[string]any{"storage_class": "standard-wffc", "access_mode": "ReadWriteMany"})})
		c.want(http.StatusUnprocessableEntity, code, body, "standard-wffc does not support ReadWriteMany", "ReadWriteOnce", "access_mode")

		// Bad overrides are refused, naming the field, and change nothing.
		code, body = c.do(http.MethodPatch, path, map[string]any{"capability_overrides": map[string]any{
			"provisioners": map[string]any{"disk.csi.local.dev": map[string]any{"access_modes": []string{"ReadWriteSometimes"}}}}})
		c.want(http.StatusBadRequest, code, body, "capability_overrides")
		_, env := c.do(http.MethodGet, path, nil)
		if got := field(env, "capability_overrides", "provisioners", "disk.csi.local.dev", "access_modes"); fmt.Sprint(got) != "[ReadWriteOnce]" {
			t.Fatalf("a refused patch changed the overrides to %v", got)
		}

		// A null removes an entry.
		code, body = c.do(http.MethodPatch, path, map[string]any{"capability_overrides": map[string]any{"provisioners": map[string]any{"disk.csi.local.dev": nil}}})
		c.want(http.StatusOK, code, body)
		c.eventually(10*time.Second, "the provisioner override removed", func() bool {
			d := detailIn(t, c.storageClasses(url.Values{"environment": {eastID}})["standard-wffc"], eastID)
			return d.AccessModes == nil && d.CapabilitySource.AccessModes == "unknown"
		})
	})

	t.Run("unreachable environments stay, marked stale", func(t *testing.T) {
		west.SetReachable(false)
		defer west.SetReachable(true)
		cut := time.Now()
		c.eventually(time.Minute, "west stale", func() bool {
			return detailIn(t, c.storageClasses(nil)["gp3"], westID).Stale
		})
		got := c.storageClasses(nil)
		gp3 := detailIn(t, got["gp3"], westID)
		if gp3.ObservedTime.Before(cut.Add(-time.Second)) || gp3.ObservedTime.After(time.Now()) || gp3.Provisioner != "ebs.csi.aws.com" {
			t.Errorf("stale gp3 = %+v (cut at %s)", gp3, cut)
		}
		if s := got["standard"].Summary; s.StaleEnvironmentCount != 1 || s.EnvironmentCount != 2 {
			t.Errorf("standard summary while west is down: %+v", s)
		}
		if e := detailIn(t, got["standard"], eastID); e.Stale {
			t.Error("east is marked stale while only west is down")
		}
		west.SetReachable(true)
		c.waitLive(westID)
	})
}

// TestFleetVolumes lists volumes of every environment from the records, with
// filters.
func TestFleetVolumes(t *testing.T) {
	// Status reporting records DELETED.
	g := gatewaytest.Start(t, gatewaytest.Options{NATSURL: natstest.Start(t).URL})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east, west := clusters[0], clusters[1]
	eastID, westID := east.Spec.Environment.ID, west.Spec.Environment.ID
	c.register(east)
	c.register(west)
	ids := map[string]string{}
	for _, v := range []struct{ env, class string }{{eastID, "standard"}, {eastID, "archive"}, {westID, "gp3"}} {
		id := uuid.NewString()
		ids[v.env+"/"+v.class] = id
		code, body := c.do(http.MethodPost, volumesPath(v.env)+"?id="+id,
			map[string]any{"spec": storageSpec("fleet", "1Gi", map[string]any{"storage_class": v.class})})
		c.want(http.StatusCreated, code, body)
	}
	list := func(query url.Values) []string {
		var out []string
		for token := ""; ; {
			q := url.Values{"max_page_size": {"2"}}
			for k, v := range query {
				q[k] = v
			}
			if token != "" {
				q.Set("page_token", token)
			}
			var page struct {
				Volumes []struct {
					ID            string `json:"id"`
					EnvironmentID string `json:"environment_id"`
				} `json:"volumes"`
				NextPageToken string `json:"next_page_token"`
			}
			c.getJSON("/api/v1alpha1/volumes?"+q.Encode(), &page)
			for _, v := range page.Volumes {
				out = append(out, v.EnvironmentID+"/"+v.ID)
			}
			if token = page.NextPageToken; token == "" {
				slices.Sort(out)
				return out
			}
		}
	}
	want := func(keys ...string) []string {
		var out []string
		for _, k := range keys {
			env, _, _ := strings.Cut(k, "/")
			out = append(out, env+"/"+ids[k])
		}
		slices.Sort(out)
		return out
	}
	if got := list(nil); !slices.Equal(got, want(eastID+"/standard", eastID+"/archive", westID+"/gp3")) {
		t.Errorf("all volumes: %v", got)
	}
	if got := list(url.Values{"environment": {westID}}); !slices.Equal(got, want(westID+"/gp3")) {
		t.Errorf("west volumes: %v", got)
	}
	if got := list(url.Values{"storage_class": {"archive"}}); !slices.Equal(got, want(eastID+"/archive")) {
		t.Errorf("archive volumes: %v", got)
	}
	running := c.waitStatus(eastID, ids[eastID+"/standard"], "RUNNING", time.Minute)
	// The fleet list names the bound volume as the environment's list does.
	pv := field(running, "spec", "metadata", "volume_name")
	c.eventually(30*time.Second, "the fleet list to name the bound volume", func() bool {
		_, page := c.do(http.MethodGet, "/api/v1alpha1/volumes?storage_class=standard&environment="+eastID, nil)
		vols, _ := page["volumes"].([]any)
		return pv != nil && len(vols) == 1 && field(vols[0].(map[string]any), "spec", "metadata", "volume_name") == pv
	})
	code, body := c.do(http.MethodDelete, volumesPath(eastID)+"/"+ids[eastID+"/standard"], nil)
	c.want(http.StatusNoContent, code, body)
	c.eventually(time.Minute, "the deleted volume recorded DELETED", func() bool {
		return slices.Equal(list(url.Values{"status": {"DELETED"}}), want(eastID+"/standard"))
	})
	if got := list(nil); slices.Contains(got, eastID+"/"+ids[eastID+"/standard"]) {
		t.Errorf("a DELETED volume is listed without asking for it: %v", got)
	}
	code, body = c.do(http.MethodGet, "/api/v1alpha1/volumes?status=GONE", nil)
	c.want(http.StatusBadRequest, code, body, "status")
	// A filter naming an environment that does not exist is a 404 naming it.
	for _, path := range []string{"/api/v1alpha1/volumes?environment=nowhere", "/api/v1alpha1/storage-classes?environment=" + eastID + "&environment=nowhere"} {
		code, body = c.do(http.MethodGet, path, nil)
		c.want(http.StatusNotFound, code, body, "nowhere", "environment")
	}
}

// TestFleetSurvivesRestartWithDeadCluster: the gateway (the real binary) is
// stopped, one cluster dies, and the gateway starts again. Its first answer
// already shows the dead cluster's classes from before, marked stale and
// dated; the live one is current; and the dead one is current again once it
// is back. What was persisted holds no secret-looking parameter.
func TestFleetSurvivesRestartWithDeadCluster(t *testing.T) {
	binary := gatewayproc.Binary(t)
	db := pgtest.NewDatabase(t)
	env := gatewayproc.Env(t, binary, "SG_DATABASE_URL="+db.URL, "SG_NATS_URL="+natstest.Start(t).URL,
		"SG_ALLOWED_CLUSTER_CIDRS=127.0.0.0/8")
	east, west := clusters[0], clusters[1]
	eastID, westID := east.Spec.Environment.ID, west.Spec.Environment.ID

	first := gatewayproc.Start(t, binary, env)
	c := client{t: t, base: "http://" + first.Addr, token: first.Token()}
	c.register(east)
	c.register(west)
	c.waitLive(eastID, westID)
	var before fleet.EnvironmentClasses
	c.getJSON("/api/v1alpha1/environments/"+eastID+"/storage-classes", &before)
	if err := first.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-first.Done; err != nil {
		t.Fatalf("gateway stopped with %v\n%s", err, first.Logs())
	}
	stopped := time.Now()

	east.SetReachable(false)
	defer east.SetReachable(true)
	second := gatewayproc.Start(t, binary, env)
	c = client{t: t, base: "http://" + second.Addr, token: second.Token()}
	var after fleet.EnvironmentClasses
	c.getJSON("/api/v1alpha1/environments/"+eastID+"/storage-classes", &after)
	if !after.Stale || after.ObservedTime.IsZero() || after.ObservedTime.After(stopped) || len(after.Classes) != len(before.Classes) {
		t.Fatalf("after the restart east shows stale=%v observed %s with %d classes; want stale, observed before %s, %d classes",
			after.Stale, after.ObservedTime, len(after.Classes), stopped, len(before.Classes))
	}
	for i, d := range after.Classes {
		b := before.Classes[i]
		if !d.Stale || d.Name != b.Name || d.Provisioner != b.Provisioner || !reflect.DeepEqual(d.Capacity, b.Capacity) ||
			!slices.Equal(d.AccessModes, b.AccessModes) || !maps.Equal(d.Parameters, b.Parameters) {
			t.Errorf("restored %+v, was %+v", d, b)
		}
	}
	c.waitLive(westID)
	std := c.storageClasses(nil)["standard"]
	if std.Summary.EnvironmentCount != 2 || std.Summary.StaleEnvironmentCount != 1 || !detailIn(t, std, eastID).Stale {
		t.Errorf("standard while east is down: %+v", std.Summary)
	}

	conn, err := pgx.Connect(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var persisted string
	if err := conn.QueryRow(t.Context(), `SELECT objects::text FROM fleet_snapshots WHERE environment_id = $1`, eastID).Scan(&persisted); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"provisioner-secret", "disk-credentials"} {
		if strings.Contains(persisted, secret) {
			t.Errorf("the persisted snapshot holds %q", secret)
		}
	}

	east.SetReachable(true)
	c.waitLive(eastID)
}
