package e2e

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/snapshots"
	"github.com/dcm-project/storage-gateway/internal/status"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

func snapshotsPath(envID, volumeID string) string {
	return volumesPath(envID) + "/" + volumeID + "/snapshots"
}

// adminSnapshots is the cluster admin's view of VolumeSnapshots.
func adminSnapshots(t testing.TB, cluster *harness.Cluster) snapshotclient.Interface {
	t.Helper()
	cs, err := snapshotclient.NewForConfig(cluster.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// runningVolume creates a volume of class and waits until it is RUNNING.
func (c client) runningVolume(envID, class string) string {
	c.t.Helper()
	id := uuid.NewString()
	code, body := c.do(http.MethodPost, volumesPath(envID)+"?id="+id,
		map[string]any{"spec": storageSpec("snapped", "1Gi", map[string]any{"storage_class": class})})
	c.want(http.StatusCreated, code, body)
	c.waitStatus(envID, id, "RUNNING", time.Minute)
	return id
}

// waitReady polls a snapshot until it is READY.
func (c client) waitReady(envID, volumeID, id string) map[string]any {
	c.t.Helper()
	var last map[string]any
	c.eventually(time.Minute, "snapshot "+id+" READY", func() bool {
		_, last = c.do(http.MethodGet, snapshotsPath(envID, volumeID)+"/"+id, nil)
		return last["status"] == "READY"
	})
	return last
}

// TestSnapshotsOfVolumes snapshots volumes through the gateway on both
// harness clusters, whose CSI plugins run behind the real snapshot
// controller and csi-snapshotter: each refusal names its field and
// changes nothing, a snapshot turns READY with its restore size, a replay
// answers the snapshot made, and a deletion removes the VolumeSnapshot.
// Each status change reaches NATS on the snapshots' subject, once, and
// DCM's stream holds only volume events.
func TestSnapshotsOfVolumes(t *testing.T) {
	natsServer := natstest.Start(t)
	dcm := natsServer.DCMStream()
	events := natsServer.Stream("snapshots", snapshots.EventSubject)
	g := gatewaytest.Start(t, gatewaytest.Options{ReconcileInterval: time.Second, NATSURL: natsServer.URL})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east, west := clusters[0], clusters[1]
	// A VolumeSnapshotClass of another driver, as a cluster may hold
	// (before the gateway connects: it lists classes when it does).
	foreign := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "other-driver"}, Driver: "other.csi.example", DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	classes := adminSnapshots(t, east).SnapshotV1().VolumeSnapshotClasses()
	if _, err := classes.Create(t.Context(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = classes.Delete(context.Background(), foreign.Name, metav1.DeleteOptions{}) })
	c.register(east)
	c.register(west)
	eastID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace
	vol := c.runningVolume(eastID, "snapshots")
	plain := c.runningVolume(eastID, "standard")
	path := snapshotsPath(eastID, vol)
	vs := adminSnapshots(t, east).SnapshotV1().VolumeSnapshots(ns)

	t.Run("refusals name their field and change nothing", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			path    string
			body    any
			status  int
			mention []string
		}{
			{"no default class for the driver", path + "?id=" + uuid.NewString(), nil, 422, []string{"snapshot_class", "no default", "snapshots"}},
			{"a class that does not exist", path + "?id=" + uuid.NewString(), map[string]any{"snapshot_class": "csi-hostpath-snapclass"}, 422, []string{"snapshot_class", "does not exist"}},
			{"a class of another driver", path + "?id=" + uuid.NewString(), map[string]any{"snapshot_class": "other-driver"}, 422, []string{"snapshot_class", "other.csi.example"}},
			{"a volume whose driver cannot snapshot", snapshotsPath(eastID, plain) + "?id=" + uuid.NewString(), nil, 422, []string{"snapshot_class", "cannot be snapshotted"}},
			{"not a class name", path + "?id=" + uuid.NewString(), map[string]any{"snapshot_class": "Not_A_Name"}, 400, []string{"snapshot_class"}},
			{"an unknown field", path + "?id=" + uuid.NewString(), map[string]any{"class": "snapshots"}, 400, nil},
			{"no id and no key", path, map[string]any{"snapshot_class": "snapshots"}, 400, []string{"Idempotency-Key"}},
			{"an unknown volume", snapshotsPath(eastID, uuid.NewString()) + "?id=" + uuid.NewString(), nil, 404, nil},
			{"another environment's volume", snapshotsPath(west.Spec.Environment.ID, vol) + "?id=" + uuid.NewString(), nil, 404, nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				c := client{t: t, base: g.URL, token: g.Tokens.Admin}
				code, body := c.do(http.MethodPost, tt.path, tt.body)
				c.want(tt.status, code, body, tt.mention...)
			})
		}
		// (Other tests' snapshots share the cluster.)
		for _, v := range []string{vol, plain} {
			list, err := vs.List(t.Context(), metav1.ListOptions{LabelSelector: "dcm.project/source-volume=" + v})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 0 {
				t.Fatalf("refused creates left %d VolumeSnapshots of %s", len(list.Items), v)
			}
		}
		var records int
		if err := g.DB.QueryRow(t.Context(), `SELECT count(*) FROM snapshots`).Scan(&records); err != nil || records != 0 {
			t.Fatalf("refused creates left %d records (%v)", records, err)
		}
	})

	first := "nightly-" + uuid.NewString()[:8]
	t.Run("snapshot turns READY with its restore size; a replay answers it", func(t *testing.T) {
		c := client{t: t, base: g.URL, token: g.Tokens.Admin}
		body := map[string]any{"snapshot_class": "snapshots"}
		code, snap := c.do(http.MethodPost, path+"?id="+first, body)
		c.want(http.StatusCreated, code, snap)
		if snap["volume_id"] != vol || snap["namespace"] != ns || snap["snapshot_class"] != "snapshots" {
			t.Fatalf("created snapshot: %v", snap)
		}
		ready := c.waitReady(eastID, vol, first)
		if ready["restore_size"] != "1Gi" {
			t.Fatalf("ready snapshot: %v; want restore_size 1Gi", ready)
		}
		reported := waitEvents(t, events, first, []string{"PENDING", "READY"}, time.Minute)
		e := reported[slices.IndexFunc(reported, func(e natstest.Event) bool { return e.Data.ID == first && e.Data.Status == "READY" })]
		if e.Type != snapshots.EventType || e.Subject != snapshots.EventSubject || e.EnvironmentID != eastID ||
			e.Data.VolumeID != vol || e.Data.RestoreSize != "1Gi" || e.MsgID != e.ID {
			t.Fatalf("READY event %+v", e)
		}
		obj, err := vs.Get(t.Context(), first, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if obj.Labels["dcm.project/source-volume"] != vol || *obj.Spec.Source.PersistentVolumeClaimName != vol {
			t.Fatalf("VolumeSnapshot %v does not name its volume %s", obj, vol)
		}
		code, again := c.do(http.MethodPost, path+"?id="+first, body)
		c.want(http.StatusOK, code, again)
		code, again = c.do(http.MethodPost, path+"?id="+first, nil) // the class it was given is the default of a replay
		c.want(http.StatusOK, code, again)
		code, conflict := c.do(http.MethodPost, path+"?id="+first, map[string]any{"snapshot_class": "other-driver"})
		c.want(http.StatusConflict, code, conflict, "id", "snapshot class snapshots")
		code, conflict = c.do(http.MethodPost, snapshotsPath(eastID, plain)+"?id="+first, body)
		c.want(http.StatusConflict, code, conflict, "id", "another volume")

		// A viewer reads; it does not snapshot.
		viewer := client{t: t, base: g.URL, token: g.Tokens.Viewer}
		code, got := viewer.do(http.MethodGet, path+"/"+first, nil)
		viewer.want(http.StatusOK, code, got)
		code, got = viewer.do(http.MethodPost, path+"?id="+uuid.NewString(), body)
		viewer.want(http.StatusForbidden, code, got)
	})

	keyed := ""
	t.Run("an Idempotency-Key names one snapshot", func(t *testing.T) {
		c := client{t: t, base: g.URL, token: g.Tokens.Admin}
		key := uuid.NewString()
		body := map[string]any{"snapshot_class": "snapshots"}
		code, snap := c.do(http.MethodPost, path, body, "Idempotency-Key", key)
		c.want(http.StatusCreated, code, snap)
		keyed = fmt.Sprint(snap["id"])
		code, again := c.do(http.MethodPost, path, body, "Idempotency-Key", key)
		c.want(http.StatusOK, code, again)
		if again["id"] != keyed {
			t.Fatalf("replay under the key answered %v, want %s", again["id"], keyed)
		}
		code, other := c.do(http.MethodPost, snapshotsPath(eastID, plain), body, "Idempotency-Key", key)
		c.want(http.StatusUnprocessableEntity, code, other, "Idempotency-Key")
		c.waitReady(eastID, vol, keyed)
	})

	t.Run("list", func(t *testing.T) {
		c := client{t: t, base: g.URL, token: g.Tokens.Admin}
		code, page := c.do(http.MethodGet, path+"?max_page_size=1", nil)
		c.want(http.StatusOK, code, page)
		want := []string{first, keyed}
		slices.Sort(want)
		got := idsOf(page["snapshots"])
		code, next := c.do(http.MethodGet, path+"?max_page_size=1&page_token="+fmt.Sprint(page["next_page_token"]), nil)
		c.want(http.StatusOK, code, next)
		got = append(got, idsOf(next["snapshots"])...)
		if !slices.Equal(got, want) {
			t.Fatalf("listed %v over two pages, want %v", got, want)
		}
	})

	t.Run("restore and clone through the volume create", func(t *testing.T) {
		c := client{t: t, base: g.URL, token: g.Tokens.Admin}
		create := func(capacity string, hints map[string]any) (string, int, map[string]any) {
			id := uuid.NewString()
			code, body := c.do(http.MethodPost, volumesPath(eastID)+"?id="+id, map[string]any{"spec": storageSpec("copy", capacity, hints)})
			return id, code, body
		}
		from := func(source map[string]any) map[string]any {
			return map[string]any{"storage_class": "snapshots", "source": source}
		}
		westVolume := c.runningVolume(west.Spec.Environment.ID, "csi-hostpath")
		westSnapshot := uuid.NewString()
		code, body := c.do(http.MethodPost, snapshotsPath(west.Spec.Environment.ID, westVolume)+"?id="+westSnapshot, nil)
		c.want(http.StatusCreated, code, body)
		for _, tt := range []struct {
			name     string
			capacity string
			hints    map[string]any
			status   int
			mention  []string
		}{
			{"smaller than the restore size", "512Mi", from(map[string]any{"snapshot": first}), 422, []string{"spec.capacity", "1Gi"}},
			{"another environment's snapshot", "1Gi", from(map[string]any{"snapshot": westSnapshot}), 422, []string{"source.snapshot", "not found in environment " + eastID}},
			{"another namespace", "1Gi", map[string]any{"storage_class": "snapshots", "namespace": "dcm-scratch", "source": map[string]any{"snapshot": first}}, 422, []string{"namespace", ns}},
			{"a clone by another driver", "1Gi", from(map[string]any{"volume": plain}), 422, []string{"storage_class", "source's driver"}},
			{"an unknown volume", "1Gi", from(map[string]any{"volume": uuid.NewString()}), 422, []string{"source.volume", "not found"}},
			{"both sources", "1Gi", from(map[string]any{"volume": vol, "snapshot": first}), 400, []string{"source"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				c := client{t: t, base: g.URL, token: g.Tokens.Admin}
				id, code, body := create(tt.capacity, tt.hints)
				c.want(tt.status, code, body, tt.mention...)
				if n := claims(t, east, ns, id); n != 0 {
					t.Fatalf("a refused create left %d claims", n)
				}
			})
		}
		for _, source := range []map[string]any{{"snapshot": first}, {"volume": vol}} {
			id, code, body := create("1Gi", from(source))
			c.want(http.StatusCreated, code, body)
			got := c.waitStatus(eastID, id, "RUNNING", time.Minute)
			if !reflect.DeepEqual(field(got, "spec", "provider_hints", "kubernetes", "source"), source) {
				t.Fatalf("volume from %v shows %v", source, got)
			}
			pvc, err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), id, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if ref := pvc.Spec.DataSourceRef; ref == nil || (ref.Name != source["snapshot"] && ref.Name != source["volume"]) {
				t.Fatalf("claim from %v has data source %v", source, ref)
			}
			// A replay answers the volume; one without the source is another request.
			code, body = c.do(http.MethodPost, volumesPath(eastID)+"?id="+id, map[string]any{"spec": storageSpec("copy", "1Gi", from(source))})
			c.want(http.StatusOK, code, body)
			code, body = c.do(http.MethodPost, volumesPath(eastID)+"?id="+id, map[string]any{"spec": storageSpec("copy", "1Gi", map[string]any{"storage_class": "snapshots"})})
			c.want(http.StatusConflict, code, body, "source")
			code, body = c.do(http.MethodDelete, volumesPath(eastID)+"/"+id, nil)
			c.want(http.StatusNoContent, code, body)
			c.eventually(time.Minute, "the copy's claim gone", func() bool { return claims(t, east, ns, id) == 0 })
		}
		// Left open, the class is the source's, not the environment's
		// default (whose driver cannot copy it).
		for _, source := range []map[string]any{{"snapshot": first}, {"volume": vol}} {
			id, code, body := create("1Gi", map[string]any{"source": source})
			c.want(http.StatusCreated, code, body)
			pvc, err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), id, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if class := ptr.Deref(pvc.Spec.StorageClassName, ""); class != "snapshots" {
				t.Fatalf("a copy of %v without a class is in class %q, want its source's", source, class)
			}
			code, body = c.do(http.MethodDelete, volumesPath(eastID)+"/"+id, nil)
			c.want(http.StatusNoContent, code, body)
		}
	})

	t.Run("the driver's default class when none is named", func(t *testing.T) {
		c := client{t: t, base: g.URL, token: g.Tokens.Admin}
		westID := west.Spec.Environment.ID
		westVol := c.runningVolume(westID, "csi-hostpath")
		id := uuid.NewString()
		code, snap := c.do(http.MethodPost, snapshotsPath(westID, westVol)+"?id="+id, nil)
		c.want(http.StatusCreated, code, snap)
		if snap["snapshot_class"] != "csi-hostpath-snapclass" {
			t.Fatalf("snapshot without a class: %v; want the driver's default csi-hostpath-snapclass", snap)
		}
		c.waitReady(westID, westVol, id)
	})

	t.Run("delete", func(t *testing.T) {
		c := client{t: t, base: g.URL, token: g.Tokens.Admin}
		code, body := c.do(http.MethodDelete, path+"/"+first, nil)
		c.want(http.StatusNoContent, code, body)
		c.eventually(time.Minute, "the deleted snapshot not found", func() bool {
			code, _ := c.do(http.MethodGet, path+"/"+first, nil)
			_, err := vs.Get(t.Context(), first, metav1.GetOptions{})
			return code == http.StatusNotFound && apierrors.IsNotFound(err)
		})
		code, body = c.do(http.MethodDelete, path+"/"+first, nil)
		c.want(http.StatusNotFound, code, body)
		recordedDeleted(t, g, first)
		waitEvents(t, events, first, []string{"PENDING", "READY", "DELETING", "DELETED"}, time.Minute)
	})

	t.Run("a VolumeSnapshot deleted behind the gateway's back is gone", func(t *testing.T) {
		c := client{t: t, base: g.URL, token: g.Tokens.Admin}
		if err := vs.Delete(t.Context(), keyed, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		recordedDeleted(t, g, keyed)
		code, body := c.do(http.MethodGet, path+"/"+keyed, nil)
		c.want(http.StatusNotFound, code, body)
		// The snapshot controller's finalizers may hold it DELETING long
		// enough to be seen, or not.
		c.eventually(time.Minute, "snapshot "+keyed+" reported DELETED", func() bool {
			got := natstest.For(events.Events(), keyed)
			return slices.Equal(got, []string{"PENDING", "READY", "DELETED"}) || slices.Equal(got, []string{"PENDING", "READY", "DELETING", "DELETED"})
		})
	})

	t.Run("an interrupted create is completed", func(t *testing.T) {
		id := uuid.NewString()
		if _, err := g.DB.Exec(t.Context(), `INSERT INTO snapshots (environment_id, id, volume_id, namespace, snapshot_class, create_time, update_time)
			VALUES ($1, $2, $3, $4, 'snapshots', now() - interval '2 minutes', now() - interval '2 minutes')`, eastID, id, vol, ns); err != nil {
			t.Fatal(err)
		}
		c := client{t: t, base: g.URL, token: g.Tokens.Admin}
		c.waitReady(eastID, vol, id)
		if _, err := vs.Get(t.Context(), id, metav1.GetOptions{}); err != nil {
			t.Fatalf("the completed create's VolumeSnapshot: %v", err)
		}
	})

	t.Run("a volume adopted from the storage SP can be snapshotted; snapshots the gateway did not make are not its", func(t *testing.T) {
		c := client{t: t, base: g.URL, token: g.Tokens.Admin}
		// A claim as DCM's storage SP makes it: its labels, no annotation.
		id := "sp-" + uuid.NewString()[:8]
		spClaim := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: map[string]string{
				"dcm.project/managed-by": "dcm", "dcm.project/dcm-instance-id": id, "dcm.project/dcm-service-type": "storage"}},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To("snapshots"),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if _, err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), spClaim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Adoption reads the gateway's cache of the cluster's claims: a
		// dry run shows when the new claim is in it.
		c.eventually(30*time.Second, "the storage SP's claim seen by the gateway", func() bool {
			code, body := c.do(http.MethodPost, "/api/v1alpha1/environments/"+eastID+":adopt", map[string]any{"namespace": ns, "validate_only": true})
			return code == http.StatusOK && slices.Contains(adoptedIDs(body), id)
		})
		code, body := c.do(http.MethodPost, "/api/v1alpha1/environments/"+eastID+":adopt", map[string]any{"namespace": ns})
		c.want(http.StatusOK, code, body)
		if !slices.Contains(adoptedIDs(body), id) {
			t.Fatalf("adoption did not adopt %s: %v", id, body)
		}
		c.waitStatus(eastID, id, "RUNNING", time.Minute)
		// A VolumeSnapshot labelled as the gateway labels its own, that it
		// did not make: never listed, read or reported.
		stray := "stray-" + uuid.NewString()[:8]
		if _, err := vs.Create(t.Context(), &snapshotv1.VolumeSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: stray, Labels: map[string]string{"dcm.project/managed-by": "dcm", "dcm.project/source-volume": id}},
			Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &id},
				VolumeSnapshotClassName: ptr.To("snapshots")},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		snap := uuid.NewString()
		code, body = c.do(http.MethodPost, snapshotsPath(eastID, id)+"?id="+snap, map[string]any{"snapshot_class": "snapshots"})
		c.want(http.StatusCreated, code, body)
		c.waitReady(eastID, id, snap)
		code, page := c.do(http.MethodGet, snapshotsPath(eastID, id), nil)
		c.want(http.StatusOK, code, page)
		if got := idsOf(page["snapshots"]); !slices.Equal(got, []string{snap}) {
			t.Fatalf("the adopted volume's snapshots: %v, want only %s", got, snap)
		}
		code, body = c.do(http.MethodGet, snapshotsPath(eastID, id)+"/"+stray, nil)
		c.want(http.StatusNotFound, code, body)
		waitEvents(t, events, snap, []string{"PENDING", "READY"}, time.Minute)
		if got := natstest.For(events.Events(), stray); len(got) != 0 {
			t.Fatalf("a VolumeSnapshot the gateway did not make was reported: %v", got)
		}
	})

	t.Run("DCM's stream holds its volume events and no snapshot's", func(t *testing.T) {
		waitEvents(t, dcm, vol, []string{"PROVISIONING", "RUNNING"}, time.Minute)
		for _, e := range dcm.Events() {
			if e.Type != status.EventType {
				t.Errorf("DCM's stream holds a %s event: %+v", e.Type, e)
			}
		}
	})
}

// recordedDeleted waits until the reconciler has recorded a snapshot
// DELETED.
func recordedDeleted(t *testing.T, g *gatewaytest.Gateway, id string) {
	t.Helper()
	client{t: t}.eventually(time.Minute, "snapshot "+id+" recorded DELETED", func() bool {
		var st string
		err := g.DB.QueryRow(t.Context(), `SELECT status FROM snapshots WHERE id = $1`, id).Scan(&st)
		return err == nil && st == "DELETED"
	})
}

// idsOf are the ids of a list's items.
func idsOf(items any) []string {
	var ids []string
	list, _ := items.([]any)
	for _, item := range list {
		if m, ok := item.(map[string]any); ok {
			ids = append(ids, fmt.Sprint(m["id"]))
		}
	}
	return ids
}
