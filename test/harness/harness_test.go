package harness

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/dcm-project/storage-gateway/test/poll"
)

// clusters are the repository's local clusters (environments/local-*.yaml),
// started once for the package.
var clusters []*Cluster

func TestMain(m *testing.M) {
	flag.Parse()
	// Benchmarks alone (-run '^$') measure cluster start-up on an idle machine.
	if run := flag.Lookup("test.run"); run != nil && run.Value.String() == "^$" {
		os.Exit(m.Run())
	}
	os.Exit(RunWithLocalClusters(m, 0, func(started []*Cluster) { clusters = started }))
}

func TestTwoIndependentClustersRun(t *testing.T) {
	if len(clusters) < 2 {
		t.Fatalf("want at least two local clusters, got %d", len(clusters))
	}
	a, b := clusters[0], clusters[1]
	if a.ServerURL() == b.ServerURL() {
		t.Fatalf("clusters share an API server address %s", a.ServerURL())
	}
	// Objects in one cluster are invisible in the other.
	ctx := t.Context()
	ns := a.Spec.Environment.Namespace
	pvc := newClaim("only-in-"+a.Name(), "", corev1.ReadWriteOnce, nil, "1Gi")
	if _, err := a.AdminClient().CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AdminClient().CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("claim created in %s is visible in %s (err=%v)", a.Name(), b.Name(), err)
	}
	// Their storage class zoos differ, as real fleets do.
	if slices.Equal(classNames(t, a), classNames(t, b)) {
		t.Fatalf("both clusters have the same classes %v; the fleet has nothing to aggregate", classNames(t, a))
	}
	for _, c := range clusters {
		v, err := c.AdminClient().Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v1.36.3" {
			t.Errorf("%s reports version %q, want v1.36.3", c.Name(), v.GitVersion)
		}
	}
}

// TestEveryClassReachesItsExpectedPhase creates one claim per StorageClass in
// every cluster and checks the outcome the class is built for.
func TestEveryClassReachesItsExpectedPhase(t *testing.T) {
	for _, c := range clusters {
		for _, sc := range classes(t, c) {
			t.Run(c.Name()+"/"+sc.Name, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				mode := widestAccessMode(t, c, sc.Provisioner)
				pvc := create(t, c, newClaim("phase-"+sc.Name, sc.Name, mode, nil, "2Gi"))

				switch {
				case sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer:
					waitForEvent(t, c, pvc, "WaitForFirstConsumer")
					if got := getClaim(t, c, pvc).Status.Phase; got != corev1.ClaimPending {
						t.Fatalf("WaitForFirstConsumer claim is %s, want Pending", got)
					}
				case sc.Parameters[ParamFail] == "always":
					waitForEvent(t, c, pvc, "ProvisioningFailed")
					waitForEventCount(t, c, pvc, "ProvisioningFailed", 2)
					if got := getClaim(t, c, pvc).Status.Phase; got != corev1.ClaimPending {
						t.Fatalf("claim on always-failing class is %s, want Pending", got)
					}
				case sc.Parameters[ParamFailTimes] != "":
					n, _ := strconv.Atoi(sc.Parameters[ParamFailTimes])
					bound := waitForBound(t, c, pvc)
					if got := countEvents(t, c, bound, "ProvisioningFailed"); got < n {
						t.Fatalf("claim bound after %d ProvisioningFailed events, want %d first", got, n)
					}
					waitForEvent(t, c, bound, "ProvisioningSucceeded")
				case sc.Parameters[ParamDelay] != "":
					delay, _ := time.ParseDuration(sc.Parameters[ParamDelay])
					start := time.Now()
					waitForBound(t, c, pvc)
					if took := time.Since(start); took < delay {
						t.Fatalf("slow class bound after %s, before its %s delay", took, delay)
					}
				default:
					bound := waitForBound(t, c, pvc)
					waitForEvent(t, c, bound, "ProvisioningSucceeded")
					pv, err := c.AdminClient().CoreV1().PersistentVolumes().Get(ctx, bound.Spec.VolumeName, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != sc.Provisioner {
						t.Fatalf("PV source %+v, want CSI driver %s", pv.Spec.PersistentVolumeSource, sc.Provisioner)
					}
					if pv.Spec.StorageClassName != sc.Name || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != bound.UID {
						t.Fatalf("PV %s not bound to the claim through class %s: %+v", pv.Name, sc.Name, pv.Spec)
					}
					for k := range pv.Spec.CSI.VolumeAttributes {
						if strings.HasPrefix(k, "csi.storage.k8s.io/") || strings.HasPrefix(k, harnessParamPrefix) {
							t.Errorf("PV volume attributes leak class parameter %q", k)
						}
					}
				}
			})
		}
	}
}

func TestDriversRefuseModesTheyLack(t *testing.T) {
	east := cluster(t, "local-east")
	block := corev1.PersistentVolumeBlock

	t.Run("block on a filesystem-only driver", func(t *testing.T) {
		t.Parallel()
		pvc := create(t, east, newClaim("block-on-files", "shared-files", corev1.ReadWriteOnce, &block, "1Gi"))
		msg := waitForEvent(t, east, pvc, "ProvisioningFailed")
		if !strings.Contains(strings.ToLower(msg), "block") {
			t.Fatalf("ProvisioningFailed message %q does not name the volume mode", msg)
		}
	})
	t.Run("RWX on a disk driver", func(t *testing.T) {
		t.Parallel()
		pvc := create(t, east, newClaim("rwx-on-disk", "standard", corev1.ReadWriteMany, nil, "1Gi"))
		msg := waitForEvent(t, east, pvc, "ProvisioningFailed")
		if !strings.Contains(msg, "access mode ReadWriteMany") {
			t.Fatalf("ProvisioningFailed message %q does not name the access mode", msg)
		}
	})
	t.Run("block on a block-capable driver", func(t *testing.T) {
		t.Parallel()
		pvc := create(t, east, newClaim("block-on-block", "block", corev1.ReadWriteOnce, &block, "1Gi"))
		bound := waitForBound(t, east, pvc)
		if bound.Spec.VolumeMode == nil || *bound.Spec.VolumeMode != block {
			t.Fatalf("bound claim volume mode %v, want Block", bound.Spec.VolumeMode)
		}
	})
}

func TestExpansionCompletes(t *testing.T) {
	for _, c := range clusters {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			sc := defaultClass(t, c)
			pvc := waitForBound(t, c, create(t, c, newClaim("grow", sc, widestAccessMode(t, c, provisionerOf(t, c, sc)), nil, "1Gi")))

			// Watch every revision of the claim, so a short Resizing phase is seen.
			claims := c.AdminClient().CoreV1().PersistentVolumeClaims(pvc.Namespace)
			w, err := claims.Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + pvc.Name, ResourceVersion: pvc.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			patch := []byte(`{"spec":{"resources":{"requests":{"storage":"3Gi"}}}}`)
			if _, err := claims.Patch(t.Context(), pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			sawResizing := false
			want := resource.MustParse("3Gi")
			var got *corev1.PersistentVolumeClaim
			timeout := time.After(60 * time.Second)
			for got == nil {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						t.Fatal("watch closed before the expansion completed")
					}
					cur, isClaim := ev.Object.(*corev1.PersistentVolumeClaim)
					if !isClaim {
						continue
					}
					sawResizing = sawResizing || !resizingSince(cur).IsZero()
					if capacity := quantityOf(cur.Status.Capacity); capacity.Cmp(want) == 0 {
						got = cur
					}
				case <-timeout:
					t.Fatal("expansion did not complete within 60s")
				}
			}
			if !sawResizing {
				t.Error("never observed the Resizing condition during expansion")
			}
			if !resizingSince(got).IsZero() {
				t.Error("Resizing condition left on the claim after expansion")
			}
			pv, err := c.AdminClient().CoreV1().PersistentVolumes().Get(t.Context(), got.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if q := quantityOf(pv.Spec.Capacity); q.Cmp(want) != 0 {
				t.Fatalf("PV capacity %s, want %s", q.String(), want.String())
			}
			waitForEvent(t, c, got, "VolumeResizeSuccessful")
		})
	}
}

func TestNonExpandableClassRefusesGrowth(t *testing.T) {
	east := cluster(t, "local-east")
	pvc := waitForBound(t, east, create(t, east, newClaim("fixed", "archive", corev1.ReadWriteOnce, nil, "1Gi")))
	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
	_, err := east.AdminClient().CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(t.Context(), pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Fatalf("growing a claim of a non-expandable class: err=%v, want Forbidden/Invalid", err)
	}
}

func TestStorageQuotaIsEnforced(t *testing.T) {
	east := cluster(t, "local-east")
	pvc := newClaim("too-big", "standard", corev1.ReadWriteOnce, nil, "60Gi")
	pvc.Namespace = "dcm-scratch"
	_, err := east.AdminClient().CoreV1().PersistentVolumeClaims("dcm-scratch").Create(t.Context(), pvc, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		t.Fatalf("claim over the 50Gi quota: err=%v, want Forbidden exceeded quota", err)
	}
	// The quota controller tracks usage of claims that fit.
	small := newClaim("fits", "standard", corev1.ReadWriteOnce, nil, "10Gi")
	if _, err := east.AdminClient().CoreV1().PersistentVolumeClaims("dcm-scratch").Create(t.Context(), small, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = east.AdminClient().CoreV1().PersistentVolumeClaims("dcm-scratch").Delete(context.Background(), small.Name, metav1.DeleteOptions{})
	})
	poll.Value(t, 60*time.Second, func() (string, bool) {
		q, err := east.AdminClient().CoreV1().ResourceQuotas("dcm-scratch").Get(t.Context(), "storage", metav1.GetOptions{})
		if err != nil {
			return err.Error(), false
		}
		used := q.Status.Used[corev1.ResourceRequestsStorage]
		return used.String(), used.Cmp(resource.MustParse("10Gi")) >= 0
	})
}

// TestGatewayTokenIsLeastPrivilege asks the API server, as the gateway, what
// it may do.
func TestGatewayTokenIsLeastPrivilege(t *testing.T) {
	for _, c := range clusters {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			gw, err := kubernetes.NewForConfig(c.GatewayConfig())
			if err != nil {
				t.Fatal(err)
			}
			allowed := func(ns, group, resource, verb string) bool {
				t.Helper()
				r, err := gw.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: ns, Group: group, Resource: resource, Verb: verb,
					}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return r.Status.Allowed
			}
			for _, ns := range c.Spec.Environment.Namespaces() {
				for _, verb := range []string{"create", "get", "list", "watch", "patch", "delete"} {
					if !allowed(ns, "", "persistentvolumeclaims", verb) {
						t.Errorf("gateway may not %s PVCs in %s", verb, ns)
					}
				}
				if !allowed(ns, "", "events", "list") {
					t.Errorf("gateway may not list events in %s", ns)
				}
			}
			for _, r := range []string{"storageclasses", "csidrivers", "csistoragecapacities"} {
				if !allowed("", "storage.k8s.io", r, "watch") {
					t.Errorf("gateway may not watch %s", r)
				}
				if allowed("", "storage.k8s.io", r, "create") {
					t.Errorf("gateway may create %s", r)
				}
			}
			for _, r := range []struct{ group, resource string }{{"snapshot.storage.k8s.io", "volumesnapshotclasses"}, {"storage.k8s.io", "volumeattributesclasses"}} {
				if !allowed("", r.group, r.resource, "list") || allowed("", r.group, r.resource, "create") {
					t.Errorf("gateway may not list %s, or may create them", r.resource)
				}
			}
			for _, denied := range []struct{ ns, group, resource, verb string }{
				{"kube-system", "", "persistentvolumeclaims", "create"},
				{c.Spec.Environment.Namespace, "", "secrets", "get"},
				{c.Spec.Environment.Namespace, "", "pods", "create"},
				{"", "", "persistentvolumes", "delete"},
				{"", "", "namespaces", "create"},
			} {
				if allowed(denied.ns, denied.group, denied.resource, denied.verb) {
					t.Errorf("gateway may %s %s in %q", denied.verb, denied.resource, denied.ns)
				}
			}
			// And the token really works for what it is granted, through the proxy.
			if _, err := gw.StorageV1().StorageClasses().List(t.Context(), metav1.ListOptions{}); err != nil {
				t.Errorf("gateway cannot list storage classes: %v", err)
			}
		})
	}
}

func TestGatewayKubeconfigIsMinimal(t *testing.T) {
	c := clusters[0]
	kc, err := c.GatewayKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	s := string(kc)
	for _, want := range []string{c.ServerURL(), "certificate-authority-data", "token: "} {
		if !strings.Contains(s, want) {
			t.Errorf("gateway kubeconfig lacks %q", want)
		}
	}
	for _, unwanted := range []string{"client-key-data", "exec:", "auth-provider", "insecure-skip-tls-verify"} {
		if strings.Contains(s, unwanted) {
			t.Errorf("gateway kubeconfig contains %q", unwanted)
		}
	}
}

// TestUnreachableAndBack runs first (not parallel): it cuts the gateway's path.
func TestUnreachableAndBack(t *testing.T) {
	c := cluster(t, "local-west")
	cfg := c.GatewayConfig()
	cfg.Timeout = 2 * time.Second
	gw, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Discovery().ServerVersion(); err != nil {
		t.Fatalf("reachable cluster: %v", err)
	}
	c.SetReachable(false)
	if _, err := gw.Discovery().ServerVersion(); err == nil {
		c.SetReachable(true)
		t.Fatal("cut cluster still answered")
	}
	// The admin path (controllers, tests) is not affected.
	if _, err := c.AdminClient().Discovery().ServerVersion(); err != nil {
		t.Fatalf("admin path broken while the gateway path is cut: %v", err)
	}
	c.SetReachable(true)
	poll.Value(t, 15*time.Second, func() (string, bool) {
		_, err := gw.Discovery().ServerVersion()
		return fmt.Sprint(err), err == nil
	})
}

// TestRestartAPIServer runs first (not parallel): it restarts an API server.
func TestRestartAPIServer(t *testing.T) {
	c := cluster(t, "local-east")
	pvc := create(t, c, newClaim("survives-restart", "standard", corev1.ReadWriteOnce, nil, "1Gi"))
	if err := c.RestartAPIServer(); err != nil {
		t.Fatal(err)
	}
	gw, err := kubernetes.NewForConfig(c.GatewayConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Same address, certificates, token and data after the restart.
	got := poll.Value(t, 30*time.Second, func() (*corev1.PersistentVolumeClaim, bool) {
		p, err := gw.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(t.Context(), pvc.Name, metav1.GetOptions{})
		return p, err == nil
	})
	if got.UID != pvc.UID {
		t.Fatalf("claim UID changed across restart: %s -> %s", pvc.UID, got.UID)
	}
	if _, err := c.AdminClient().CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("admin credentials after restart: %v", err)
	}
	// Controllers reconnect: a new claim still binds.
	waitForBound(t, c, create(t, c, newClaim("after-restart", "standard", corev1.ReadWriteOnce, nil, "1Gi")))
}

// BenchmarkClusterStart reports how long one harness cluster takes to start
// (control plane, RBAC, objects, controllers) and stop.
//
//	go test ./test/harness -run '^$' -bench ClusterStart -benchtime 3x
func BenchmarkClusterStart(b *testing.B) {
	specs, err := LocalSpecs()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ControlPlaneBinaries(b.Context()); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c, err := Start(b.Context(), specs[0])
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c.Stop()
		b.StartTimer()
	}
}

// --- helpers ---

func cluster(t *testing.T, name string) *Cluster {
	t.Helper()
	for _, c := range clusters {
		if c.Name() == name {
			return c
		}
	}
	t.Fatalf("no cluster %q", name)
	return nil
}

func newClaim(prefix, class string, mode corev1.PersistentVolumeAccessMode, volumeMode *corev1.PersistentVolumeMode, size string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + rand.String(5)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			VolumeMode:  volumeMode,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			},
		},
	}
	if class != "" {
		pvc.Spec.StorageClassName = &class
	}
	return pvc
}

// create makes the claim in the environment's namespace and deletes it when
// the test ends.
func create(t *testing.T, c *Cluster, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	t.Helper()
	ns := c.Spec.Environment.Namespace
	got, err := c.AdminClient().CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.AdminClient().CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), got.Name, metav1.DeleteOptions{})
	})
	return got
}

func getClaim(t *testing.T, c *Cluster, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	t.Helper()
	got, err := c.AdminClient().CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(t.Context(), pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func waitForBound(t *testing.T, c *Cluster, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	t.Helper()
	return poll.Value(t, 60*time.Second, func() (*corev1.PersistentVolumeClaim, bool) {
		got := getClaim(t, c, pvc)
		return got, got.Status.Phase == corev1.ClaimBound
	})
}

// claimEvents lists the events recorded for the claim.
func claimEvents(t *testing.T, c *Cluster, pvc *corev1.PersistentVolumeClaim) []corev1.Event {
	t.Helper()
	list, err := c.AdminClient().CoreV1().Events(pvc.Namespace).List(t.Context(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(pvc.UID),
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func countEvents(t *testing.T, c *Cluster, pvc *corev1.PersistentVolumeClaim, reason string) int {
	n := 0
	for _, e := range claimEvents(t, c, pvc) {
		if e.Reason == reason {
			n += max(int(e.Count), 1)
		}
	}
	return n
}

// waitForEvent waits for an event with the reason and returns its message.
func waitForEvent(t *testing.T, c *Cluster, pvc *corev1.PersistentVolumeClaim, reason string) string {
	t.Helper()
	return poll.Value(t, 60*time.Second, func() (string, bool) {
		for _, e := range claimEvents(t, c, pvc) {
			if e.Reason == reason {
				return e.Message, true
			}
		}
		return fmt.Sprintf("no %s event", reason), false
	})
}

func waitForEventCount(t *testing.T, c *Cluster, pvc *corev1.PersistentVolumeClaim, reason string, n int) {
	t.Helper()
	poll.Value(t, 60*time.Second, func() (int, bool) {
		got := countEvents(t, c, pvc, reason)
		return got, got >= n
	})
}

func classes(t *testing.T, c *Cluster) []storagev1.StorageClass {
	t.Helper()
	list, err := c.AdminClient().StorageV1().StorageClasses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func classNames(t *testing.T, c *Cluster) []string {
	var names []string
	for _, sc := range classes(t, c) {
		names = append(names, sc.Name)
	}
	slices.Sort(names)
	return names
}

func defaultClass(t *testing.T, c *Cluster) string {
	t.Helper()
	for _, sc := range classes(t, c) {
		if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			return sc.Name
		}
	}
	t.Fatalf("%s has no default class", c.Name())
	return ""
}

func provisionerOf(t *testing.T, c *Cluster, class string) string {
	t.Helper()
	for _, sc := range classes(t, c) {
		if sc.Name == class {
			return sc.Provisioner
		}
	}
	t.Fatalf("%s has no class %s", c.Name(), class)
	return ""
}

// widestAccessMode is the last (most shared) access mode the driver supports.
func widestAccessMode(t *testing.T, c *Cluster, provisioner string) corev1.PersistentVolumeAccessMode {
	t.Helper()
	for _, d := range c.Spec.Cluster.Drivers {
		if d.Name == provisioner {
			return d.AccessModes[len(d.AccessModes)-1]
		}
	}
	t.Fatalf("%s has no driver %s", c.Name(), provisioner)
	return ""
}
