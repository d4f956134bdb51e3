package capabilities_test

import (
	"reflect"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
)

func storageObjects() capabilities.Objects {
	old := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	newer := metav1.NewTime(old.Add(time.Hour))
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	fsPolicy := storagev1.FileFSGroupPolicy
	zone := func(z string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": z}}
	}
	qty := func(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
	return capabilities.Objects{
		Classes: []*storagev1.StorageClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "slow", CreationTimestamp: old,
				Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true", "unrelated": "x"}},
				Provisioner: "files.example.com"},
			{ObjectMeta: metav1.ObjectMeta{Name: "fast", CreationTimestamp: newer,
				Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
				Provisioner: "ebs.csi.aws.com", AllowVolumeExpansion: ptr.To(true), VolumeBindingMode: &wffc,
				Parameters: map[string]string{
					"type": "gp3", "csi.storage.k8s.io/provisioner-secret-name": "creds", "adminPassword": "hunter2",
					"authToken": "t", "cloudCredentials": "c", "restuserkey": "heketi", "apiKey": "k",
					"luksPassphrase": "p", "tlsCert": "c", "privateRegistry": "r",
				}},
		},
		Drivers: []*storagev1.CSIDriver{{ObjectMeta: metav1.ObjectMeta{Name: "files.example.com"},
			Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), StorageCapacity: ptr.To(true), FSGroupPolicy: &fsPolicy,
				VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}}},
		Capacities: []*storagev1.CSIStorageCapacity{
			{ObjectMeta: metav1.ObjectMeta{Name: "a1", Namespace: "kube-system"}, StorageClassName: "slow", Capacity: qty("1Ti"), NodeTopology: zone("a"), MaximumVolumeSize: qty("100Gi")},
			{ObjectMeta: metav1.ObjectMeta{Name: "a2", Namespace: "other"}, StorageClassName: "slow", Capacity: qty("1Ti"), NodeTopology: zone("a"), MaximumVolumeSize: qty("200Gi")},
			{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "kube-system"}, StorageClassName: "slow", Capacity: qty("512Gi"), NodeTopology: zone("b")},
			{ObjectMeta: metav1.ObjectMeta{Name: "unpublished", Namespace: "kube-system"}, StorageClassName: "fast", NodeTopology: zone("a")},
		},
		SnapshotClasses: []*snapshotv1.VolumeSnapshotClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "a-ebs"}, Driver: "ebs.csi.aws.com", DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete},
			{ObjectMeta: metav1.ObjectMeta{Name: "z-ebs-default", Annotations: map[string]string{capabilities.DefaultSnapshotClassAnnotation: "true", "unrelated": "x"}},
				Driver: "ebs.csi.aws.com", DeletionPolicy: snapshotv1.VolumeSnapshotContentRetain},
			{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Driver: "other.example.com"},
		},
		Tiers: []*storagev1.VolumeAttributesClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "gold"}, DriverName: "ebs.csi.aws.com", Parameters: map[string]string{"iops": "16000"}},
			{ObjectMeta: metav1.ObjectMeta{Name: "bronze"}, DriverName: "other.example.com"},
		},
	}
}

// TestCloneClassesAreThoseOfTheSameProvisioner: a clone is made by its
// source's driver; in-tree provisioners make none.
func TestCloneClassesAreThoseOfTheSameProvisioner(t *testing.T) {
	class := func(name, provisioner string) *storagev1.StorageClass {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner}
	}
	got := capabilities.Describe(capabilities.Objects{Classes: []*storagev1.StorageClass{
		class("in-tree", "kubernetes.io/aws-ebs"), class("fast", "ebs.csi.aws.com"), class("slow", "ebs.csi.aws.com"), class("files", "files.example.com"),
	}}, capabilities.Overrides{})
	want := map[string][]string{"fast": {"fast", "slow"}, "slow": {"fast", "slow"}, "files": {"files"}, "in-tree": nil}
	for _, c := range got {
		if !reflect.DeepEqual(c.CloneClasses, want[c.Name]) {
			t.Errorf("%s: clone classes %v, want %v", c.Name, c.CloneClasses, want[c.Name])
		}
	}
}

func TestDescribe(t *testing.T) {
	got := capabilities.Describe(storageObjects(), capabilities.Overrides{})
	if len(got) != 2 || got[0].Name != "fast" || got[1].Name != "slow" {
		t.Fatalf("classes = %+v, want fast and slow by name", got)
	}
	fast, slow := got[0], got[1]

	t.Run("the newest annotated default is the default", func(t *testing.T) {
		if !fast.IsDefault || slow.IsDefault {
			t.Fatalf("is_default: fast %v, slow %v", fast.IsDefault, slow.IsDefault)
		}
	})
	t.Run("settings with Kubernetes defaults filled", func(t *testing.T) {
		if fast.VolumeBindingMode != "WaitForFirstConsumer" || !fast.AllowVolumeExpansion || fast.ReclaimPolicy != "Delete" {
			t.Errorf("fast = %+v", fast)
		}
		if slow.VolumeBindingMode != "Immediate" || slow.AllowVolumeExpansion {
			t.Errorf("slow = %+v", slow)
		}
	})
	t.Run("secret-looking parameters are removed", func(t *testing.T) {
		if want := map[string]string{"type": "gp3"}; !reflect.DeepEqual(fast.Parameters, want) {
			t.Fatalf("parameters = %v, want %v", fast.Parameters, want)
		}
		if slow.Parameters == nil {
			t.Fatal("a class without parameters must show an empty object")
		}
	})
	t.Run("capabilities and their source", func(t *testing.T) {
		if fast.CapabilitySource != (capabilities.CapabilitySource{AccessModes: "driver", VolumeModes: "driver"}) {
			t.Errorf("fast source = %+v", fast.CapabilitySource)
		}
		if slow.AccessModes != nil || slow.CapabilitySource.AccessModes != capabilities.SourceUnknown {
			t.Errorf("slow access = %v from %s, want unknown", slow.AccessModes, slow.CapabilitySource.AccessModes)
		}
	})
	t.Run("CSIDriver facts only where a CSIDriver exists", func(t *testing.T) {
		if fast.CSIDriver != nil {
			t.Errorf("fast has driver facts %+v without a CSIDriver", fast.CSIDriver)
		}

		want := &capabilities.DriverFacts{AttachRequired: ptr.To(false), StorageCapacity: ptr.To(true),
			VolumeLifecycleModes: []string{"Persistent"}, FSGroupPolicy: "File"}
		if !reflect.DeepEqual(slow.CSIDriver, want) {
			t.Errorf("slow driver facts = %+v, want %+v", slow.CSIDriver, want)
		}
	})
	t.Run("snapshot classes and tiers of the class's driver", func(t *testing.T) {
		if fast.Snapshots != capabilities.Supported || !reflect.DeepEqual(fast.SnapshotClasses, []string{"z-ebs-default", "a-ebs"}) {
			t.Errorf("fast snapshots %s through %v, want yes through the default, then a-ebs", fast.Snapshots, fast.SnapshotClasses)
		}
		if !reflect.DeepEqual(fast.Tiers, []string{"gold"}) {
			t.Errorf("fast tiers %v, want [gold]", fast.Tiers)
		}
		if slow.Snapshots != capabilities.Unsupported || slow.SnapshotClasses != nil || slow.Tiers == nil || len(slow.Tiers) != 0 {
			t.Errorf("slow snapshots %s through %v, tiers %#v; want no, none, known empty", slow.Snapshots, slow.SnapshotClasses, slow.Tiers)
		}
		objs := storageObjects()
		objs.SnapshotClassesDenied, objs.TiersDenied = true, true
		for _, c := range capabilities.Describe(objs, capabilities.Overrides{}) {
			if c.Snapshots != capabilities.Unknown || c.SnapshotClasses != nil || c.Tiers != nil {
				t.Errorf("%s where neither may be read: snapshots %s through %v, tiers %v; want unknown, none, nil", c.Name, c.Snapshots, c.SnapshotClasses, c.Tiers)
			}
		}
	})
	t.Run("capacity summed per class and topology segment", func(t *testing.T) {
		if fast.Capacity != nil {
			t.Errorf("fast publishes no capacity but shows %+v", fast.Capacity)
		}
		want := &capabilities.Capacity{Total: "2560Gi", TotalBytes: 2560 << 30, Segments: []capabilities.Segment{
			{Topology: "topology.kubernetes.io/zone=a", Capacity: "2Ti", CapacityBytes: 2 << 40, MaximumVolumeSize: "200Gi"},
			{Topology: "topology.kubernetes.io/zone=b", Capacity: "512Gi", CapacityBytes: 512 << 30},
		}}
		if !reflect.DeepEqual(slow.Capacity, want) {
			t.Errorf("slow capacity = %+v, want %+v", slow.Capacity, want)
		}
	})
}

// What the index keeps and persists describes exactly like the cluster's
// objects, and holds no secret-looking parameter.
func TestSlimDescribesTheSame(t *testing.T) {
	objs := storageObjects()
	overrides := capabilities.Overrides{Provisioners: map[string]capabilities.Override{"files.example.com": {AccessModes: []string{"ReadWriteMany"}}}}
	slim := capabilities.Slim(objs)
	if got, want := capabilities.Describe(slim, overrides), capabilities.Describe(objs, overrides); !reflect.DeepEqual(got, want) {
		t.Fatalf("slimmed objects describe as\n%+v\nwant\n%+v", got, want)
	}
	for _, c := range slim.Classes {
		if _, ok := c.Parameters["adminPassword"]; ok {
			t.Fatalf("slimmed class %s keeps a secret-looking parameter", c.Name)
		}
		if _, ok := c.Annotations["unrelated"]; ok {
			t.Fatalf("slimmed class %s keeps annotations Describe never reads", c.Name)
		}
	}
	for _, c := range slim.SnapshotClasses {
		if _, ok := c.Annotations["unrelated"]; ok {
			t.Fatalf("slimmed snapshot class %s keeps annotations Describe never reads", c.Name)
		}
	}
	objs.SnapshotClassesDenied, objs.TiersDenied = true, true
	if slim := capabilities.Slim(objs); !slim.SnapshotClassesDenied || !slim.TiersDenied {
		t.Fatal("slimmed objects forget that snapshot classes and tiers may not be read")
	}
}
