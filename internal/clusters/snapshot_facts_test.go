package clusters_test

import (
	"context"
	"slices"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// The snapshot classes and tiers a cluster offers are listed with its other
// storage facts where the gateway may read them; a grant without them
// leaves them unknown (denied) without failing the cluster, and a cluster
// that does not serve the snapshot API has none.
func TestSnapshotClassesAndTiersAreListed(t *testing.T) {
	objects := func(c *clusters.Cluster) capabilities.Objects {
		t.Helper()
		poll.Until(t, 10*time.Second, "the storage facts listed", c.StorageSynced)
		return c.StorageObjects()
	}
	t.Run("granted", func(t *testing.T) {
		objs := objects(ensureReady(t, newPool(t, fast), eastTarget("pool-snapshot-facts")))
		if got := names(objs.SnapshotClasses); objs.SnapshotClassesDenied || !slices.Equal(got, []string{"snapshots"}) {
			t.Errorf("snapshot classes %v (denied %v), want [snapshots]", got, objs.SnapshotClassesDenied)
		}
		if got := names(objs.Tiers); objs.TiersDenied || !slices.Equal(got, []string{"gold", "platinum", "silver"}) {
			t.Errorf("tiers %v (denied %v), want [gold platinum silver]", got, objs.TiersDenied)
		}
		if d := objs.SnapshotClasses[0]; d.Driver != "snap.csi.local.dev" || d.ManagedFields != nil {
			t.Errorf("snapshot class %+v, want driver snap.csi.local.dev without managed fields", d)
		}
	})
	t.Run("not granted", func(t *testing.T) {
		target := eastTarget("pool-snapshot-facts-denied")
		target.Namespaces = target.Namespaces[:1]
		target.Connection.Token = requiredOnlyToken(t, east.AdminClient(), target.Namespaces)
		objs := objects(ensureReady(t, newPool(t, fast), target))
		if !objs.SnapshotClassesDenied || !objs.TiersDenied || !objs.QuotasDenied || len(objs.SnapshotClasses)+len(objs.Tiers) != 0 {
			t.Errorf("without the optional grants: snapshot classes %v (denied %v), tiers %v (denied %v), quotas denied %v; want all denied and empty",
				names(objs.SnapshotClasses), objs.SnapshotClassesDenied, names(objs.Tiers), objs.TiersDenied, objs.QuotasDenied)
		}
	})
	t.Run("no snapshot API", func(t *testing.T) {
		spec := east.Spec
		spec.Environment.ID = "pool-no-snapshot-api"
		spec.Cluster.Drivers = slices.DeleteFunc(slices.Clone(spec.Cluster.Drivers), func(d harness.Driver) bool { return d.Plugin })
		spec.Cluster.Objects = nil
		plain, err := harness.Start(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(plain.Stop)
		target := clusters.Target{EnvironmentID: spec.Environment.ID, Namespaces: spec.Environment.Namespaces(),
			Connection: kubeconfig.Connection{Server: plain.ServerURL(), CAData: plain.CAData(), Token: plain.GatewayToken()}}
		c := ensureReady(t, newPool(t, fast), target)
		objs := objects(c)
		if objs.SnapshotClassesDenied || len(objs.SnapshotClasses) != 0 {
			t.Errorf("a cluster without the snapshot API: snapshot classes %v (denied %v), want none, known", names(objs.SnapshotClasses), objs.SnapshotClassesDenied)
		}
		// Not a failed listing either, which would list every fact again
		// at each health check.
		qty := resource.MustParse("1Gi")
		if _, err := plain.AdminClient().StorageV1().CSIStorageCapacities("kube-system").Create(t.Context(), &storagev1.CSIStorageCapacity{
			ObjectMeta: metav1.ObjectMeta{Name: "pool-no-snapshot-api"}, StorageClassName: "standard", Capacity: &qty}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll.Never(t, 4*fast.HealthInterval, "the facts listed again with nothing changed", func() bool {
			return slices.ContainsFunc(c.CSIStorageCapacities(), func(x *storagev1.CSIStorageCapacity) bool { return x.Name == "pool-no-snapshot-api" })
		})
	})
}

// requiredOnlyToken is a token of a ServiceAccount granted what the probe
// requires in the one namespace of namespaces and nothing optional: a gateway set up before it
// read quotas, snapshot classes or tiers.
func requiredOnlyToken(t *testing.T, admin kubernetes.Interface, namespaces []string) string {
	t.Helper()
	ctx := t.Context()
	const name = "required-only"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: harness.GatewayNamespace}}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: harness.GatewayNamespace}}
	var clusterRules, namespaceRules []rbacv1.PolicyRule
	for _, p := range clusters.RequiredPermissions(namespaces) {
		rule := rbacv1.PolicyRule{APIGroups: []string{p.Group}, Resources: []string{p.Resource}, Verbs: []string{p.Verb}}
		if p.Namespace == "" {
			clusterRules = append(clusterRules, rule)
		} else {
			namespaceRules = append(namespaceRules, rule)
		}
	}
	create := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	_, err := admin.CoreV1().ServiceAccounts(harness.GatewayNamespace).Create(ctx, sa, metav1.CreateOptions{})
	create("ServiceAccount", err)
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: clusterRules}, metav1.CreateOptions{})
	create("ClusterRole", err)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subject}, metav1.CreateOptions{})
	create("ClusterRoleBinding", err)
	_, err = admin.RbacV1().Roles(namespaces[0]).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: namespaceRules}, metav1.CreateOptions{})
	create("Role", err)
	_, err = admin.RbacV1().RoleBindings(namespaces[0]).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subject}, metav1.CreateOptions{})
	create("RoleBinding", err)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.RbacV1().RoleBindings(namespaces[0]).Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.RbacV1().Roles(namespaces[0]).Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.CoreV1().ServiceAccounts(harness.GatewayNamespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
	tr, err := admin.CoreV1().ServiceAccounts(harness.GatewayNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	create("token", err)
	return tr.Status.Token
}

// An environment's VolumeSnapshots are watched only once the snapshot
// service asks (FollowSnapshots): before, no informer runs — an idle
// fleet pays nothing for them — and after, the gateway's snapshots are
// read from the cache.
func TestSnapshotsAreWatchedOnlyOnceFollowed(t *testing.T) {
	c := ensureReady(t, newPool(t, fast), eastTarget("pool-snapshots-followed"))
	ns := east.Spec.Environment.Namespace
	snaps, err := snapshotclient.NewForConfig(east.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	const name = "pool-followed"
	if _, err := snaps.SnapshotV1().VolumeSnapshots(ns).Create(t.Context(), &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{clusters.ManagedByLabel: clusters.ManagedByValue}},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("no-such-claim")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = snaps.SnapshotV1().VolumeSnapshots(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	poll.Never(t, time.Second, "a snapshot cache before it was asked for", func() bool {
		_, _, synced := c.Snapshot(ns, name)
		return synced
	})
	c.FollowSnapshots()
	poll.Until(t, 10*time.Second, "the followed snapshot in the cache", func() bool {
		_, found, synced := c.Snapshot(ns, name)
		return found && synced
	})
}
