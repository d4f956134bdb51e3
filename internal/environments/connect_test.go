package environments_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// runConnector runs a connector over a fresh pool, for a replica that owns
// every environment, until the test ends and returns the pool.
func runConnector(t *testing.T, reg *registrytest.Fixture) *clusters.Pool {
	t.Helper()
	pool := clusters.NewPool(clusters.PoolOptions{Client: clusters.ClientOptions{Egress: registrytest.Loopback},
		HealthInterval: 500 * time.Millisecond, HealthTimeout: 500 * time.Millisecond})
	t.Cleanup(pool.Close)
	c := environments.NewConnector(environments.ConnectorOptions{Registry: reg.Registry, Pool: pool, Owned: reg.Member(t, "replica-1")})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return pool
}

// TestPoolFollowsTheRegistry: the connector connects registered
// environments, follows updates and deletions at once, and records what
// the pool learns about reachability without a probe.
func TestPoolFollowsTheRegistry(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	pool := runConnector(t, reg)

	if _, _, err := reg.Registry.Register(ctx, registration(t, "follow")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the registered environment synced in the pool", func() bool {
		c, ok := pool.Get("follow")
		return ok && c.Health().Synced
	})
	before, _ := pool.Get("follow")
	if _, err := reg.Registry.Update(ctx, "follow", []byte(`{"allowed_namespaces":[]}`)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "a connection with the updated namespaces took over", func() bool {
		c, ok := pool.Get("follow")
		return ok && c != before && c.Health().Synced
	})

	cluster.SetReachable(false)
	poll.Until(t, 30*time.Second, "the registry shows the pool's UNREACHABLE without a probe", func() bool {
		env, err := reg.Registry.Get(ctx, "follow")
		return err == nil && env.Status.State == environments.StateUnreachable
	})
	cluster.SetReachable(true)
	poll.Until(t, 30*time.Second, "READY again", func() bool {
		env, err := reg.Registry.Get(ctx, "follow")
		return err == nil && env.Status.State == environments.StateReady
	})

	if err := reg.Registry.Delete(ctx, "follow", false); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the deleted environment left the pool", func() bool {
		_, ok := pool.Get("follow")
		return !ok
	})
}

// TestDeadClustersDoNotDelayConnecting: connecting the registry never waits
// on the network, so at start every environment is in the pool at once,
// however many clusters are dead, and the live ones sync without waiting
// for any probe.
func TestDeadClustersDoNotDelayConnecting(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("dead-%d", i)
		if _, _, err := reg.Registry.Register(ctx, registration(t, id)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cluster.SetReachable(false)
	t.Cleanup(func() { cluster.SetReachable(true) })

	pool := clusters.NewPool(clusters.PoolOptions{Client: clusters.ClientOptions{Egress: registrytest.Loopback}})
	t.Cleanup(pool.Close)
	owner := reg.Member(t, "replica-1")
	registrytest.Own(t, owner, ids...)
	connector := environments.NewConnector(environments.ConnectorOptions{Registry: reg.Registry, Pool: pool, Owned: owner})
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	start := time.Now()
	wg.Go(func() { connector.Run(runCtx) })
	var got []string
	poll.Until(t, 5*time.Second, "every environment in the pool", func() bool {
		got = pool.IDs()
		return len(got) == len(ids)
	})
	took := time.Since(start)
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Fatalf("pool holds %v, want %v", got, ids)
	}
	// One probe of a dead cluster alone takes the probe timeout (seconds).
	if took > time.Second {
		t.Fatalf("connecting %d dead clusters took %s; it must not touch the network", len(ids), took)
	}
	cluster.SetReachable(true)
	poll.Until(t, time.Minute, "every environment synced once its cluster answers", func() bool {
		for _, id := range ids {
			if c, ok := pool.Get(id); !ok || !c.Health().Synced {
				return false
			}
		}
		return true
	})
}

// TestARefusedRequestProbesAtOnce: a READY environment is re-probed only
// every SG_PROBE_READY_INTERVAL, so a permission revoked in between is
// noticed from the cluster's refusal: a request the cluster answers with 403
// has the environment probed at once (no probe loop runs here), and its
// status names what is missing.
func TestARefusedRequestProbesAtOnce(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	pool := runConnector(t, reg)
	ns := cluster.Spec.Environment.Namespace
	token, err := cluster.RestrictedToken(ctx, "revocable", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses", "csidrivers", "csistoragecapacities"}, Verbs: []string{"get", "list", "watch"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	in := registration(t, "revocable")
	in.Credentials = environments.Credentials{Explicit: tokenConnection(token)}
	in.Spec.Namespace = ns
	if _, _, err := reg.Registry.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the environment synced in the pool", func() bool { return pool.ReadyAndSynced("revocable") })

	if err := cluster.AdminClient().RbacV1().ClusterRoleBindings().Delete(ctx, "restricted-revocable", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ := pool.Get("revocable")
	poll.Until(t, 10*time.Second, "the cluster refuses a write", func() bool {
		_, err := c.Client().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "refused"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{})
		return apierrors.IsForbidden(err)
	})
	poll.Until(t, 15*time.Second, "UNAUTHORIZED, naming the missing permission", func() bool {
		env, err := reg.Registry.Get(ctx, "revocable")
		return err == nil && env.Status.State == environments.StateUnauthorized &&
			strings.Contains(env.Status.Message, "create persistentvolumeclaims in namespace "+ns)
	})
}
