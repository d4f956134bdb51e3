package fleet_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/fleet"
)

const gi = int64(1) << 30

// placementIndex is a small fleet: a and b READY in east (zones e1, e2), c
// DEGRADED, d in west, e READY but no longer watched, f READY but still
// connecting (its caches syncing). a's "fast" publishes
// 200Gi in zone-a (volumes up to 50Gi) and 80Gi in zone-b; b's "fast"
// 1Ti. a's "shared" is ReadWriteMany only, publishes nothing, and a quota
// gives its claims 10Gi; a's "mystery" has unknown modes. a's namespace
// quota leaves 400Gi; b's quotas may not be read.
func placementIndex(t *testing.T) *fleet.Index {
	t.Helper()
	class := func(name, provisioner, access string, expandable bool) *storagev1.StorageClass {
		c := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}, Provisioner: provisioner,
			AllowVolumeExpansion: ptr.To(expandable)}
		if access != "" {
			c.Annotations = map[string]string{capabilities.AccessModesAnnotation: access, capabilities.VolumeModesAnnotation: "Filesystem"}
		}
		return c
	}
	capacity := func(class, zone string, size, maxVolume int64) *storagev1.CSIStorageCapacity {
		c := &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: class + "-" + zone, Namespace: "kube-system"},
			StorageClassName: class, Capacity: resource.NewQuantity(size, resource.BinarySI),
			NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": zone}}}
		if maxVolume > 0 {
			c.MaximumVolumeSize = resource.NewQuantity(maxVolume, resource.BinarySI)
		}
		return c
	}
	quota := func(name string, hard, used corev1.ResourceList) *corev1.ResourceQuota {
		return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "dcm"},
			Status: corev1.ResourceQuotaStatus{Hard: hard, Used: used}}
	}
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.BinarySI) }
	a := capabilities.Objects{
		Classes: []*storagev1.StorageClass{
			class("fast", "disk.example.com", "ReadWriteOnce", true),
			class("shared", "files.example.com", "ReadWriteMany", false),
			class("mystery", "unknown.example.com", "", true),
		},
		Capacities: []*storagev1.CSIStorageCapacity{capacity("fast", "zone-a", 200*gi, 50*gi), capacity("fast", "zone-b", 80*gi, 0)},
		Quotas: []*corev1.ResourceQuota{
			quota("storage", corev1.ResourceList{corev1.ResourceRequestsStorage: q(500 * gi), corev1.ResourcePods: q(10)},
				corev1.ResourceList{corev1.ResourceRequestsStorage: q(100 * gi)}),
			quota("shared-files", corev1.ResourceList{"shared.storageclass.storage.k8s.io/requests.storage": q(10 * gi)}, nil),
		},
	}
	b := capabilities.Objects{
		Classes:      []*storagev1.StorageClass{class("fast", "disk.example.com", "ReadWriteOnce", true)},
		Capacities:   []*storagev1.CSIStorageCapacity{capacity("fast", "zone-a", 1024*gi, 0)},
		QuotasDenied: true,
	}
	ix := fleet.NewIndex()
	ix.SetEnvironments([]fleet.Meta{
		{ID: "a", Region: "east", Zone: "e1", State: "READY"},
		{ID: "b", Region: "east", Zone: "e2", State: "READY"},
		{ID: "c", Region: "east", Zone: "e1", State: "DEGRADED"},
		{ID: "d", Region: "west", Zone: "w1", State: "READY"},
		{ID: "e", Region: "east", Zone: "e1", State: "READY"},
		{ID: "f", Region: "east", Zone: "e1", State: "READY"},
	})
	for id, objs := range map[string]capabilities.Objects{"a": a, "b": b, "c": b, "d": b, "e": b, "f": b} {
		ix.Observe(id, objs, t0)
		if id != "f" && !ix.SetWritable(id, true) {
			t.Fatalf("%s: SetWritable reported no change", id)
		}
	}
	ix.MarkStale("e", t0)
	return ix
}

// placed is a placement as the API sends it.
type placed struct {
	Candidates []struct {
		Rank            int    `json:"rank"`
		EnvironmentID   string `json:"environment_id"`
		StorageClass    string `json:"storage_class"`
		CapabilityKnown bool   `json:"capability_known"`
		Capacity        *struct {
			Topology      string `json:"topology"`
			CapacityBytes int64  `json:"capacity_bytes"`
		} `json:"capacity"`
		Quota *struct {
			Namespace     string `json:"namespace"`
			Headroom      string `json:"headroom"`
			HeadroomBytes int64  `json:"headroom_bytes"`
		} `json:"quota"`
		QuotaKnown bool `json:"quota_known"`
	} `json:"candidates"`
	Excluded []fleet.Exclusion `json:"excluded"`
}

func place(t *testing.T, ix *fleet.Index, r fleet.Request) placed {
	t.Helper()
	p, err := ix.Place(r)
	if err != nil {
		t.Fatal(err)
	}
	n, excluded := p.Candidates(), p.Excluded()
	var buf bytes.Buffer
	if err := p.WriteJSON(&buf, r.Explain); err != nil {
		t.Fatal(err)
	}
	var out placed
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatalf("decode %s: %v", buf.String(), err)
	}
	if n != len(out.Candidates) || !slices.Equal(excluded, out.Excluded) && len(excluded)+len(out.Excluded) > 0 {
		t.Fatalf("%d candidates and %v exclusions counted, %d and %v written", n, excluded, len(out.Candidates), out.Excluded)
	}
	return out
}

func (p placed) names() []string {
	var out []string
	for _, c := range p.Candidates {
		out = append(out, c.EnvironmentID+"/"+c.StorageClass)
	}
	return out
}

// reason finds why env (and class, if given) was left out.
func (p placed) reason(env, class string) string {
	for _, e := range p.Excluded {
		if e.EnvironmentID == env && e.StorageClass == class {
			return e.Reason
		}
	}
	return ""
}

// A placement keeps READY, watched environments of the region asked, ranks
// known capability, then published capacity, then room first, and says why
// it left out the rest; capacity is judged per segment (maximum volume size
// too), quotas overall and per class.
func TestPlacementRanksWhatCanTakeTheVolume(t *testing.T) {
	ix := placementIndex(t)
	got := place(t, ix, fleet.Request{CapacityBytes: 60 * gi, AccessMode: "ReadWriteOnce", Region: "east", Explain: true})
	if want := []string{"b/fast", "a/fast", "a/mystery"}; !slices.Equal(got.names(), want) {
		t.Fatalf("candidates %v, want %v (excluded %v)", got.names(), want, got.Excluded)
	}
	for i, c := range got.Candidates {
		if c.Rank != i+1 {
			t.Fatalf("candidate %d ranked %d", i, c.Rank)
		}
	}
	bFast, aFast, mystery := got.Candidates[0], got.Candidates[1], got.Candidates[2]
	// zone-a is larger, but takes volumes up to 50Gi only.
	if aFast.Capacity == nil || aFast.Capacity.Topology != "topology.kubernetes.io/zone=zone-b" || aFast.Capacity.CapacityBytes != 80*gi {
		t.Fatalf("a/fast fits %+v, want zone-b's 80Gi", aFast.Capacity)
	}
	if aFast.Quota == nil || aFast.Quota.HeadroomBytes != 400*gi || aFast.Quota.Headroom != "400Gi" || aFast.Quota.Namespace != "dcm" || !aFast.QuotaKnown {
		t.Fatalf("a/fast quota %+v", aFast.Quota)
	}
	if bFast.Quota != nil || bFast.QuotaKnown || !bFast.CapabilityKnown || bFast.Capacity.CapacityBytes != 1024*gi {
		t.Fatalf("b/fast: %+v", bFast)
	}
	if mystery.CapabilityKnown || mystery.Capacity != nil {
		t.Fatalf("a/mystery (unknown modes, nothing published): %+v", mystery)
	}
	for _, want := range []struct{ env, class, says string }{
		{"a", "shared", "supports ReadWriteMany, not ReadWriteOnce"},
		{"c", "", "the environment is DEGRADED, not READY"},
		{"d", "", `in region "west", not "east"`},
		{"e", "", "not watched now"},
		{"f", "", "does not take writes yet"},
	} {
		if got := got.reason(want.env, want.class); !strings.Contains(got, want.says) {
			t.Errorf("%s/%s left out because %q; want it to say %q", want.env, want.class, got, want.says)
		}
	}
	if len(got.Excluded) != 5 {
		t.Errorf("excluded %v", got.Excluded)
	}

	// A class's own quota; an unknown capability never excludes.
	got = place(t, ix, fleet.Request{CapacityBytes: 20 * gi, AccessMode: "ReadWriteMany", Explain: true})
	if !slices.Equal(got.names(), []string{"a/mystery"}) ||
		!strings.Contains(got.reason("a", "shared"), "the ResourceQuota of its default namespace leaves 10Gi") {
		t.Fatalf("RWX 20Gi: %v, excluded %v", got.names(), got.Excluded)
	}
	// No segment large enough; expansion asked.
	got = place(t, ix, fleet.Request{CapacityBytes: 300 * gi, Expandable: true, Zone: "e1", Explain: true})
	if !slices.Equal(got.names(), []string{"a/mystery"}) ||
		!strings.Contains(got.reason("a", "fast"), "no published capacity segment takes 300Gi: 200Gi (volumes up to 50Gi) on topology.kubernetes.io/zone=zone-a; 80Gi on") ||
		got.reason("a", "shared") != "does not allow volume expansion" || got.reason("b", "") != `in zone "e2", not "e1"` {
		t.Fatalf("300Gi expandable in e1: %v, excluded %v", got.names(), got.Excluded)
	}
	// Without explain, nothing about what was left out; a scope hides the rest.
	got = place(t, ix, fleet.Request{CapacityBytes: gi, Environments: []string{"b"}})
	if !slices.Equal(got.names(), []string{"b/fast"}) || got.Excluded != nil {
		t.Fatalf("scoped to b: %v, excluded %v", got.names(), got.Excluded)
	}
	got = place(t, ix, fleet.Request{CapacityBytes: gi, Environments: []string{"b"}, Explain: true})
	for _, e := range got.Excluded {
		if e.EnvironmentID != "b" {
			t.Fatalf("a placement scoped to b mentions %v", e)
		}
	}
	if _, err := ix.Place(fleet.Request{CapacityBytes: gi, AccessMode: "ReadWriteAlways"}); !fault.Is(err, fault.InvalidArgument) {
		t.Fatalf("an unknown access mode: %v", err)
	}
}

// A quota's usage moving is a change of what the environment shows (its
// owner persists it): placement follows it.
func TestQuotaChangesAreObserved(t *testing.T) {
	ix := fleet.NewIndex()
	ix.SetEnvironments([]fleet.Meta{{ID: "a", State: "READY"}})
	objs := capabilities.Objects{Classes: []*storagev1.StorageClass{{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "disk.example.com"}}}
	withUsed := func(used string) capabilities.Objects {
		o := objs
		o.Quotas = []*corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "dcm"}, Status: corev1.ResourceQuotaStatus{
			Hard: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("10Gi")},
			Used: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse(used)},
		}}}
		return o
	}
	ix.Observe("a", withUsed("1Gi"), t0)
	ix.SetWritable("a", true)
	if got := place(t, ix, fleet.Request{CapacityBytes: 5 * gi}); len(got.Candidates) != 1 {
		t.Fatalf("5Gi with 9Gi of room: %v", got.names())
	}
	if !ix.Observe("a", withUsed("6Gi"), t0) {
		t.Fatal("a quota's usage moving was not a change")
	}
	if got := place(t, ix, fleet.Request{CapacityBytes: 5 * gi, Explain: true}); len(got.Candidates) != 0 || !strings.Contains(got.reason("a", "fast"), "leaves 4Gi") {
		t.Fatalf("5Gi with 4Gi of room: %v, excluded %v", got.names(), got.Excluded)
	}
	if ix.Observe("a", withUsed("6Gi"), t0) {
		t.Fatal("the same quota again was a change")
	}
}

// Asked for snapshots, placement leaves out the classes known not to be
// snapshottable, with the reason, and keeps those where it is unknown,
// flagged and ranked after the known ones.
func TestPlacementOnSnapshots(t *testing.T) {
	classes := []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "fast", ResourceVersion: "1"}, Provisioner: "disk.example.com"},
		{ObjectMeta: metav1.ObjectMeta{Name: "shared", ResourceVersion: "1"}, Provisioner: "files.example.com"},
	}
	known := capabilities.Objects{Classes: classes,
		SnapshotClasses: []*snapshotv1.VolumeSnapshotClass{{ObjectMeta: metav1.ObjectMeta{Name: "disk"}, Driver: "disk.example.com"}}}
	denied := capabilities.Objects{Classes: classes, SnapshotClassesDenied: true}
	ix := fleet.NewIndex()
	ix.SetEnvironments([]fleet.Meta{{ID: "a", State: "READY"}, {ID: "b", State: "READY"}})
	for id, objs := range map[string]capabilities.Objects{"a": denied, "b": known} {
		ix.Observe(id, objs, t0)
		ix.SetWritable(id, true)
	}
	got := place(t, ix, fleet.Request{CapacityBytes: gi, Snapshots: true, Explain: true})
	var order []string
	for _, c := range got.Candidates {
		order = append(order, c.EnvironmentID+"/"+c.StorageClass+"/"+map[bool]string{true: "known", false: "unknown"}[c.CapabilityKnown])
	}
	if want := []string{"b/fast/known", "a/fast/unknown", "a/shared/unknown"}; !slices.Equal(order, want) {
		t.Fatalf("candidates %v, want %v", order, want)
	}
	if len(got.Excluded) != 1 || got.Excluded[0].EnvironmentID != "b" || got.Excluded[0].StorageClass != "shared" ||
		!strings.Contains(got.Excluded[0].Reason, "cannot be snapshotted") {
		t.Fatalf("excluded %+v, want b's shared as not snapshottable", got.Excluded)
	}
	// Not asked, nothing is left out for it.
	if got := place(t, ix, fleet.Request{CapacityBytes: gi, Explain: true}); len(got.Candidates) != 4 || len(got.Excluded) != 0 {
		t.Fatalf("without snapshots asked: %d candidates, excluded %+v", len(got.Candidates), got.Excluded)
	}
}
