// Package harness runs real Kubernetes control planes for tests and local
// runs, without containers: etcd and kube-apiserver (through envtest) plus
// kube-controller-manager with the volume controllers, all built from pinned
// Go modules (test/tools), and an in-process storage provisioner and resizer
// with failure injection. Each cluster gets a least-privilege ServiceAccount
// token for the gateway, reached through a proxy the test can cut to make the
// cluster unreachable. It must never be imported by production code.
package harness
