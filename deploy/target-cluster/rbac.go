// Package targetcluster holds what storage-gateway needs in a cluster it
// serves — its least-privilege ServiceAccount and RBAC — as the manifest
// admins apply by hand and `storage-gateway env bootstrap` applies for them.
package targetcluster

import (
	_ "embed"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/dcm-project/storage-gateway/internal/kubeobjects"
)

// RBAC is storage-gateway-rbac.yaml: the ServiceAccount's namespace, the
// ServiceAccount, its cluster-wide storage reads, the per-namespace volume
// role and one RoleBinding of it (for the namespace dcm-volumes; bootstrap
// binds each served namespace instead).
//
//go:embed storage-gateway-rbac.yaml
var RBAC []byte

// Names of the objects in RBAC that bootstrap creates and unbootstrap
// removes.
const (
	Namespace      = "storage-gateway"
	ServiceAccount = "storage-gateway"
	VolumesBinding = "storage-gateway:volumes"
)

// Objects are RBAC's objects, with its RoleBinding repeated for each of
// namespaces (none without namespaces: the roles and the ServiceAccount).
func Objects(namespaces []string) ([]*unstructured.Unstructured, error) {
	objs, err := kubeobjects.Decode(RBAC)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" {
			out = append(out, o)
			continue
		}
		for _, ns := range namespaces {
			b := o.DeepCopy()
			b.SetNamespace(ns)
			out = append(out, b)
		}
	}
	return out, nil
}
