package capabilities_test

import (
	"slices"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
)

func class(provisioner string, annotations, parameters map[string]string) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Provisioner: provisioner, Parameters: parameters}
}

func TestAccessModesPrecedence(t *testing.T) {
	tests := []struct {
		name   string
		class  *storagev1.StorageClass
		want   []string
		source capabilities.Source
	}{
		{"annotation wins over the driver table", class("ebs.csi.aws.com", map[string]string{capabilities.AccessModesAnnotation: "ReadWriteMany, ReadOnlyMany"}, nil),
			[]string{"ReadWriteMany", "ReadOnlyMany"}, capabilities.SourceAnnotation},
		{"driver table", class("ebs.csi.aws.com", nil, nil), []string{"ReadWriteOnce", "ReadWriteOncePod"}, capabilities.SourceDriver},
		{"file driver", class("efs.csi.aws.com", nil, nil), []string{"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"}, capabilities.SourceDriver},
		{"trident nas backend", class("csi.trident.netapp.io", nil, map[string]string{"backendType": "ontap-nas-economy"}),
			[]string{"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"}, capabilities.SourceDriver},
		{"trident san backend", class("csi.trident.netapp.io", nil, map[string]string{"backendType": "ontap-san"}),
			[]string{"ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod"}, capabilities.SourceDriver},
		{"trident without a backend type", class("csi.trident.netapp.io", nil, nil), nil, capabilities.SourceUnknown},
		{"unknown driver", class("disk.csi.local.dev", nil, nil), nil, capabilities.SourceUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := capabilities.AccessModes(tt.class)
			if !slices.Equal(got.Supported, tt.want) || got.Source != tt.source {
				t.Fatalf("AccessModes = %+v, want %v from %s", got, tt.want, tt.source)
			}
		})
	}
}

func TestUnknownCapabilitiesAllowEverything(t *testing.T) {
	m := capabilities.AccessModes(class("example.com/unknown", nil, nil))
	if !m.Allows("ReadWriteMany") || !m.Allows("ReadWriteOnce") {
		t.Fatal("an unknown capability must accept every mode")
	}
	known := capabilities.AccessModes(class("ebs.csi.aws.com", nil, nil))
	if known.Allows("ReadWriteMany") || !known.Allows("ReadWriteOnce") {
		t.Fatalf("EBS allows %v", known.Supported)
	}
}

// The table covers at least the 20 well-known provisioners the fleet view
// promises, each with access and volume modes.
func TestDriverTableCoversWellKnownProvisioners(t *testing.T) {
	provisioners := []string{"ebs.csi.aws.com", "efs.csi.aws.com", "pd.csi.storage.gke.io", "filestore.csi.storage.gke.io",
		"disk.csi.azure.com", "file.csi.azure.com", "rbd.csi.ceph.com", "cephfs.csi.ceph.com", "nfs.csi.k8s.io",
		"manila.csi.openstack.org", "cinder.csi.openstack.org", "csi.vsphere.vmware.com", "pxd.portworx.com", "topolvm.io",
		"rancher.io/local-path", "hostpath.csi.k8s.io", "kubevirt.io.hostpath-provisioner", "driver.longhorn.io",
		"openebs.io/local", "csi-powerstore.dellemc.com"}
	for _, p := range provisioners {
		c := class(p, nil, nil)
		if a, v := capabilities.AccessModes(c), capabilities.VolumeModes(c); a.Source != capabilities.SourceDriver ||
			v.Source != capabilities.SourceDriver || len(a.Supported) == 0 || len(v.Supported) == 0 {
			t.Errorf("%s: access %+v, volume %+v", p, a, v)
		}
	}
}
