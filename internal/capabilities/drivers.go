package capabilities

import "strings"

// Access and volume modes, as Kubernetes spells them.
const (
	rwo  = "ReadWriteOnce"
	rox  = "ReadOnlyMany"
	rwx  = "ReadWriteMany"
	rwop = "ReadWriteOncePod"
	fs   = "Filesystem"
	blk  = "Block"
)

// driverModes is what a provisioner supports. A mode listed is supported
// for at least one volume mode; combinations a driver rejects (say RWX on
// a block-only backend) are left to the driver, which reports them.
type driverModes struct {
	access, volume []string
}

// knownDrivers holds the documented capabilities of well-known provisioners.
// Each entry names its source; when a driver's capabilities depend on the
// backend a class selects, see variants.
var knownDrivers = map[string]driverModes{
	// AWS EBS CSI driver: single-node block volumes (docs: "Access modes ReadWriteOnce, ReadWriteOncePod").
	"ebs.csi.aws.com": {[]string{rwo, rwop}, []string{fs, blk}},
	// AWS EFS CSI driver: NFS file systems, all access modes, filesystem only.
	"efs.csi.aws.com": {[]string{rwo, rox, rwx}, []string{fs}},
	// GCE Persistent Disk CSI driver: RWO, ROX, RWOP; filesystem and block.
	"pd.csi.storage.gke.io": {[]string{rwo, rox, rwop}, []string{fs, blk}},
	// Google Filestore CSI driver: NFS shares, RWO/ROX/RWX, filesystem.
	"filestore.csi.storage.gke.io": {[]string{rwo, rox, rwx}, []string{fs}},
	// Azure Disk CSI driver: RWO, RWOP; filesystem and block.
	"disk.csi.azure.com": {[]string{rwo, rwop}, []string{fs, blk}},
	// Azure File CSI driver: SMB/NFS shares, RWO/ROX/RWX, filesystem.
	"file.csi.azure.com": {[]string{rwo, rox, rwx}, []string{fs}},
	// Ceph CSI RBD: RWO, ROX, RWOP (RWX only for raw block, left to the driver); filesystem and block.
	"rbd.csi.ceph.com": {[]string{rwo, rox, rwop}, []string{fs, blk}},
	// Ceph CSI CephFS: all access modes, filesystem.
	"cephfs.csi.ceph.com": {[]string{rwo, rox, rwx, rwop}, []string{fs}},
	// NFS CSI driver (kubernetes-csi/csi-driver-nfs): RWO/ROX/RWX, filesystem.
	"nfs.csi.k8s.io": {[]string{rwo, rox, rwx}, []string{fs}},
	// OpenStack Manila CSI: shared file systems, RWO/ROX/RWX, filesystem.
	"manila.csi.openstack.org": {[]string{rwo, rox, rwx}, []string{fs}},
	// OpenStack Cinder CSI: RWO, RWOP; filesystem and block.
	"cinder.csi.openstack.org": {[]string{rwo, rwop}, []string{fs, blk}},
	// vSphere CSI (block volumes): RWO; filesystem and block.
	"csi.vsphere.vmware.com": {[]string{rwo}, []string{fs, blk}},
	// Portworx: RWO/ROX/RWX (sharedv4), filesystem and block.
	"pxd.portworx.com": {[]string{rwo, rox, rwx}, []string{fs, blk}},
	// TopoLVM: node-local LVM, RWO/RWOP, filesystem and block.
	"topolvm.io": {[]string{rwo, rwop}, []string{fs, blk}},
	// Rancher local-path-provisioner: node-local directories, RWO/RWOP, filesystem.
	"rancher.io/local-path": {[]string{rwo, rwop}, []string{fs}},
	// CSI hostpath driver (kubernetes-csi/csi-driver-host-path): RWO/RWOP, filesystem and block.
	"hostpath.csi.k8s.io": {[]string{rwo, rwop}, []string{fs, blk}},
	// KubeVirt hostpath-provisioner: RWO, filesystem.
	"kubevirt.io.hostpath-provisioner": {[]string{rwo}, []string{fs}},
	// Longhorn: RWO/RWOP, RWX through its share manager; filesystem and block.
	"driver.longhorn.io": {[]string{rwo, rwop, rwx}, []string{fs, blk}},
	// OpenEBS local PV hostpath: RWO, filesystem.
	"openebs.io/local": {[]string{rwo}, []string{fs}},
	// OpenEBS LVM local PV: RWO, filesystem and block.
	"local.csi.openebs.io": {[]string{rwo}, []string{fs, blk}},
	// OpenEBS ZFS local PV: RWO, filesystem and block.
	"zfs.csi.openebs.io": {[]string{rwo}, []string{fs, blk}},
	// Dell PowerStore CSI (block protocols): RWO/RWOP/ROX; filesystem and block.
	"csi-powerstore.dellemc.com": {[]string{rwo, rwop, rox}, []string{fs, blk}},
}

// variants are drivers whose capabilities depend on the backend a class
// selects through a parameter.
var variants = map[string]struct {
	parameter string
	byBackend map[string]driverModes // matched by substring of the parameter's value
}{
	// NetApp Trident: ontap-nas* and similar NFS backends share files (RWX);
	// ontap-san* backends are single-node block (RWO, block).
	"csi.trident.netapp.io": {"backendType", map[string]driverModes{
		"nas": {[]string{rwo, rox, rwx, rwop}, []string{fs}},
		"san": {[]string{rwo, rox, rwop}, []string{fs, blk}},
	}},
	// Pure Storage CSI: "file" backends (FlashBlade NFS) share, "block"
	// backends (FlashArray) are single-node.
	"pure-csi": {"backend", map[string]driverModes{
		"file":  {[]string{rwo, rox, rwx}, []string{fs}},
		"block": {[]string{rwo, rwop}, []string{fs, blk}},
	}},
}

// fromDriver looks a class's provisioner up in the table.
func fromDriver(provisioner string, parameters map[string]string) (driverModes, bool) {
	if d, ok := knownDrivers[provisioner]; ok {
		return d, true
	}
	v, ok := variants[provisioner]
	if !ok {
		return driverModes{}, false
	}
	value := strings.ToLower(parameters[v.parameter])
	for backend, d := range v.byBackend {
		if strings.Contains(value, backend) {
			return d, true
		}
	}
	return driverModes{}, false
}
