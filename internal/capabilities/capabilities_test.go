package capabilities_test

import (
	"errors"
	"slices"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/fault"
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
		{"invalid annotation entries are ignored", class("ebs.csi.aws.com", map[string]string{capabilities.AccessModesAnnotation: "RWX, ReadOnlyMany,ReadOnlyMany"}, nil),
			[]string{"ReadOnlyMany"}, capabilities.SourceAnnotation},
		{"an annotation without a valid entry counts as absent", class("ebs.csi.aws.com", map[string]string{capabilities.AccessModesAnnotation: " , bogus"}, nil),
			[]string{"ReadWriteOnce", "ReadWriteOncePod"}, capabilities.SourceDriver},
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
			got := capabilities.AccessModes(tt.class, capabilities.Overrides{})
			if !slices.Equal(got.Supported, tt.want) || got.Source != tt.source {
				t.Fatalf("AccessModes = %+v, want %v from %s", got, tt.want, tt.source)
			}
		})
	}
}

func TestUnknownCapabilitiesAllowEverything(t *testing.T) {
	m := capabilities.AccessModes(class("example.com/unknown", nil, nil), capabilities.Overrides{})
	if !m.Allows("ReadWriteMany") || !m.Allows("ReadWriteOnce") {
		t.Fatal("an unknown capability must accept every mode")
	}
	known := capabilities.AccessModes(class("ebs.csi.aws.com", nil, nil), capabilities.Overrides{})
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
		if a, v := capabilities.AccessModes(c, capabilities.Overrides{}), capabilities.VolumeModes(c, capabilities.Overrides{}); a.Source != capabilities.SourceDriver ||
			v.Source != capabilities.SourceDriver || len(a.Supported) == 0 || len(v.Supported) == 0 {
			t.Errorf("%s: access %+v, volume %+v", p, a, v)
		}
	}
}

// Environment overrides sit between the class's annotation and the driver
// table, a class entry beating a provisioner entry, each kind of mode on its
// own.
func TestEnvironmentOverridesPrecedence(t *testing.T) {
	overrides := capabilities.Overrides{
		StorageClasses: map[string]capabilities.Override{"fast": {AccessModes: []string{"ReadWriteOncePod"}}},
		Provisioners: map[string]capabilities.Override{
			"ebs.csi.aws.com":    {AccessModes: []string{"ReadWriteOnce"}, VolumeModes: []string{"Block"}},
			"disk.csi.local.dev": {VolumeModes: []string{"Filesystem"}},
		},
	}
	named := func(name, provisioner string, annotations map[string]string) *storagev1.StorageClass {
		c := class(provisioner, annotations, nil)
		c.Name = name
		return c
	}
	tests := []struct {
		name                 string
		class                *storagev1.StorageClass
		access, volume       []string
		accessSrc, volumeSrc capabilities.Source
	}{
		{"class entry beats provisioner entry, provisioner entry fills the other kind", named("fast", "ebs.csi.aws.com", nil),
			[]string{"ReadWriteOncePod"}, []string{"Block"}, capabilities.SourceEnvironment, capabilities.SourceEnvironment},
		{"provisioner entry beats the driver table", named("gp3", "ebs.csi.aws.com", nil),
			[]string{"ReadWriteOnce"}, []string{"Block"}, capabilities.SourceEnvironment, capabilities.SourceEnvironment},
		{"annotation beats the environment", named("gp3", "ebs.csi.aws.com", map[string]string{capabilities.AccessModesAnnotation: "ReadWriteMany"}),
			[]string{"ReadWriteMany"}, []string{"Block"}, capabilities.SourceAnnotation, capabilities.SourceEnvironment},
		{"a kind the override leaves out stays unknown for an unknown driver", named("local", "disk.csi.local.dev", nil),
			nil, []string{"Filesystem"}, capabilities.SourceUnknown, capabilities.SourceEnvironment},
		{"no entry: the driver table", named("files", "efs.csi.aws.com", nil),
			[]string{"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"}, []string{"Filesystem"}, capabilities.SourceDriver, capabilities.SourceDriver},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, v := capabilities.AccessModes(tt.class, overrides), capabilities.VolumeModes(tt.class, overrides)
			if !slices.Equal(a.Supported, tt.access) || a.Source != tt.accessSrc {
				t.Errorf("access = %+v, want %v from %s", a, tt.access, tt.accessSrc)
			}
			if !slices.Equal(v.Supported, tt.volume) || v.Source != tt.volumeSrc {
				t.Errorf("volume = %+v, want %v from %s", v, tt.volume, tt.volumeSrc)
			}
		})
	}
}

func TestOverridesValidation(t *testing.T) {
	rwo := []string{"ReadWriteOnce"}
	tests := []struct {
		name      string
		overrides capabilities.Overrides
		field     string
	}{
		{"valid", capabilities.Overrides{
			StorageClasses: map[string]capabilities.Override{"gp3": {AccessModes: rwo}},
			Provisioners:   map[string]capabilities.Override{"rancher.io/local-path": {VolumeModes: []string{"Filesystem"}}},
		}, ""},
		{"unknown access mode", capabilities.Overrides{StorageClasses: map[string]capabilities.Override{"gp3": {AccessModes: []string{"ReadWriteSometimes"}}}},
			"cfg.storage_classes.gp3.access_modes"},
		{"unknown volume mode", capabilities.Overrides{Provisioners: map[string]capabilities.Override{"x.io": {VolumeModes: []string{"Tape"}}}},
			"cfg.provisioners.x.io.volume_modes"},
		{"repeated mode", capabilities.Overrides{StorageClasses: map[string]capabilities.Override{"gp3": {AccessModes: []string{"ReadWriteOnce", "ReadWriteOnce"}}}},
			"cfg.storage_classes.gp3.access_modes"},
		{"empty entry", capabilities.Overrides{StorageClasses: map[string]capabilities.Override{"gp3": {}}}, "cfg.storage_classes.gp3"},
		{"bad class name", capabilities.Overrides{StorageClasses: map[string]capabilities.Override{"Not A Name": {AccessModes: rwo}}}, "cfg.storage_classes"},
		{"bad provisioner name", capabilities.Overrides{Provisioners: map[string]capabilities.Override{"a/b/c": {AccessModes: rwo}}}, "cfg.provisioners"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.overrides.Validate("cfg")
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Kind != fault.InvalidArgument || fe.Field != tt.field {
				t.Fatalf("Validate = %v, want an invalid-argument error naming %s", err, tt.field)
			}
		})
	}
}
