package capabilities

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// classStorageSuffix ends the name of the quota resource on the storage
// the claims of one class request: <class>.storageclass.storage.k8s.io/requests.storage.
const classStorageSuffix = ".storageclass.storage.k8s.io/" + string(corev1.ResourceRequestsStorage)

// storageResources keeps the entries of l that limit requested storage:
// requests.storage, overall or for one class.
func storageResources(l corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range l {
		if name == corev1.ResourceRequestsStorage || strings.HasSuffix(string(name), classStorageSuffix) {
			out[name] = q
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Headroom is how much more storage the ResourceQuotas of an environment's
// default namespace let its claims request.
type Headroom struct {
	// Namespace is the quotas' namespace (empty when none limits storage).
	Namespace string
	// Denied says the gateway may not read the quotas: headroom unknown.
	Denied bool
	// all is the least headroom of the quotas on every claim's storage,
	// byClass of those on one class's claims; absent means unlimited.
	all     *int64
	byClass map[string]int64
}

// QuotaHeadroom reads the headroom of objs' quotas (hard minus used, at
// least zero; the least of several).
func QuotaHeadroom(objs Objects) Headroom {
	h := Headroom{Denied: objs.QuotasDenied, byClass: map[string]int64{}}
	for _, q := range objs.Quotas {
		for name, hard := range q.Status.Hard {
			used := q.Status.Used[name]
			left := max(hard.Value()-used.Value(), 0)
			h.Namespace = q.Namespace
			if name == corev1.ResourceRequestsStorage {
				if h.all == nil || left < *h.all {
					h.all = &left
				}
				continue
			}
			if class, ok := strings.CutSuffix(string(name), classStorageSuffix); ok {
				if have, seen := h.byClass[class]; !seen || left < have {
					h.byClass[class] = left
				}
			}
		}
	}
	return h
}

// For returns the headroom for a claim of class, whether any quota limits
// it, and the quota resource that leaves the least (requests.storage, or
// the class's own).
func (h Headroom) For(class string) (bytes int64, limited bool, resource string) {
	bytes, limited = h.byClass[class]
	resource = class + classStorageSuffix
	if h.all != nil && (!limited || *h.all < bytes) {
		bytes, limited, resource = *h.all, true, string(corev1.ResourceRequestsStorage)
	}
	return bytes, limited, resource
}
