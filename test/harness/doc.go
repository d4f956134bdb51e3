// Package harness runs real Kubernetes control planes for tests and local
// runs, without containers: etcd and kube-apiserver (through envtest) plus
// kube-controller-manager with the volume controllers, all built from pinned
// Go modules (test/tools), and a storage provisioner and resizer with
// failure injection. Each cluster gets a least-privilege ServiceAccount
// token for the gateway, reached through a proxy the test can cut to make the
// cluster unreachable. It must never be imported by production code.
//
// The control plane comes from test/tools/{etcd,k8s} (etcd v3.6.7 and
// Kubernetes v1.36.3, each staging module replaced by its published
// v0.36.3), built once by test/tools/build-control-plane.sh into the user's
// cache. kube-controller-manager runs the PV binder (1 s resync), expander,
// PV/PVC protection, resource-quota and namespace controllers. Claims are
// provisioned by sig-storage-lib-external-provisioner in a process of the
// cluster's own (drivers.go: this executable again), with classes that
// fail, flap or stall on purpose; the local cluster files
// (environments/local-*.yaml) carry a StorageClass zoo — east with generic
// driver names, west emulating well-known cloud drivers — so fleet views
// have something to aggregate.
//
// A driver marked plugin is a CSI controller plugin instead (csiplugin.go:
// data-less volumes and snapshots, performance tiers as a mutable
// parameter), served on a unix socket to the Kubernetes CSI project's own
// sidecars — external-provisioner, csi-snapshotter, external-resizer and
// the snapshot controller — run as processes, built from pinned modules in
// test/tools like the control plane (sidecars.go). With them the cluster
// serves the VolumeSnapshot CRDs and the beta VolumeAttributesClass API the
// resizer reads; snapshots, restores, clones, expansion and tier changes run
// end to end as on a real cluster, refusals included.
//
// No cluster outlives the process that runs the harness, however it ends
// (lifetime.go): on Linux each process has a parent-death signal
// (kube-controller-manager directly; etcd and kube-apiserver through this
// executable, which envtest starts under their names and which sets the
// signal before executing the real binary); elsewhere that launcher runs the
// real binary in its own process group and kills the group once its parent
// is gone. A cluster keeps everything in one work directory locked by its
// process; the next start removes any whose lock nobody holds. Tests can
// cut a cluster's network path (SetReachable) and restart its API server in
// place (RestartAPIServer: same address, certificates and tokens).
package harness
