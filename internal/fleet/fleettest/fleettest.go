// Package fleettest makes synthetic storage objects for fleet index tests
// and benchmarks: what a cluster's informers would hold.
package fleettest

import (
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
)

// Provisioners the synthetic classes cycle through: two the driver table
// knows (block and file) and one it does not.
var Provisioners = []string{"ebs.csi.aws.com", "efs.csi.aws.com", "disk.example.com"}

// Objects returns n classes named class-00…, cycling through Provisioners,
// with a CSIDriver per provisioner and one CSIStorageCapacity per class
// (capacityGi each). Class 0 is the default; odd classes are expandable.
func Objects(n int, capacityGi int64) capabilities.Objects {
	var objs capabilities.Objects
	for _, p := range Provisioners {
		objs.Drivers = append(objs.Drivers, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: p},
			Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), StorageCapacity: ptr.To(true),
				VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}})
	}
	for i := range n {
		name := fmt.Sprintf("class-%02d", i)
		c := &storagev1.StorageClass{
			ObjectMeta:           metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
			Provisioner:          Provisioners[i%len(Provisioners)],
			AllowVolumeExpansion: ptr.To(i%2 == 1),
			Parameters:           map[string]string{"type": "t" + name, "csi.storage.k8s.io/provisioner-secret-name": "secret"},
		}
		if i == 0 {
			c.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
		}
		objs.Classes = append(objs.Classes, c)
		objs.Capacities = append(objs.Capacities, &storagev1.CSIStorageCapacity{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-a", Namespace: "kube-system"}, StorageClassName: name,
			Capacity:     resource.NewQuantity(capacityGi<<30, resource.BinarySI),
			NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "a"}},
		})
	}
	return objs
}
