package harness

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dcm-project/storage-gateway/test/poll"
)

// Names of what the harness creates for the gateway in every cluster.
const (
	GatewayNamespace      = "storage-gateway-system"
	GatewayServiceAccount = "storage-gateway"
	gatewayRole           = "storage-gateway"
)

// gatewayTokenTTL is how long the harness's ServiceAccount tokens live: a
// year, as an admin's `kubectl create token --duration=8760h` — far from
// the week before expiry in which the gateway reports an environment
// DEGRADED.
const gatewayTokenTTL = 365 * 24 * time.Hour

// volumeControllers are the kube-controller-manager controllers a storage
// fleet needs: binding, expansion, protection finalizers (the API server
// gives every VolumeAttributesClass one, which only its controller
// removes) and quota usage; and namespace deletion, which installs and
// `env unbootstrap` wait for.
var volumeControllers = "persistentvolume-binder-controller,persistentvolume-expander-controller," +
	"persistentvolume-protection-controller,persistentvolumeclaim-protection-controller," +
	"volumeattributesclass-protection-controller,resourcequota-controller,namespace-controller"

// Cluster is one running harness cluster.
type Cluster struct {
	// Spec is the cluster file it was started from.
	Spec Spec

	env     *envtest.Environment
	workDir string
	// workDirLock holds workDir's owner lock until Stop removes it.
	workDirLock *os.File
	admin       *rest.Config
	client      kubernetes.Interface
	proxy       *proxy

	gatewayToken string

	// cancel stops the controller manager, provisioner and resizer; wg
	// waits for them.
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Name is the environment id from the cluster file.
func (c *Cluster) Name() string { return c.Spec.Environment.ID }

// AdminConfig is a system:masters client configuration that talks to the API
// server directly (not through the cuttable proxy).
func (c *Cluster) AdminConfig() *rest.Config { return rest.CopyConfig(c.admin) }

// AdminClient is a typed clientset for AdminConfig.
func (c *Cluster) AdminClient() kubernetes.Interface { return c.client }

// ServerURL is the API server address the gateway must use: the proxy, so a
// test can make the cluster unreachable.
func (c *Cluster) ServerURL() string { return "https://" + c.proxy.addr() }

// DirectServerURL is the API server's own address, not the cuttable proxy:
// for benchmarks, where a proxy in the test process would add its CPU to
// whichever side uses it.
func (c *Cluster) DirectServerURL() string { return c.admin.Host }

// CAData is the PEM bundle that verifies the API server's certificate.
func (c *Cluster) CAData() []byte { return c.admin.CAData }

// GatewayToken is the least-privilege ServiceAccount token for the gateway.
func (c *Cluster) GatewayToken() string { return c.gatewayToken }

// GatewayKubeconfig is a kubeconfig for the gateway: ServerURL, CAData and
// GatewayToken, one context, nothing else.
func (c *Cluster) GatewayKubeconfig() ([]byte, error) {
	return TokenKubeconfig(c.Name(), c.ServerURL(), c.CAData(), c.gatewayToken, c.Spec.Environment.Namespace)
}

// TokenKubeconfig renders a minimal kubeconfig: one cluster, one bearer token,
// one context — what the gateway accepts and no more.
func TokenKubeconfig(name, server string, caData []byte, token, namespace string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos[GatewayServiceAccount] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: GatewayServiceAccount, Namespace: namespace}
	cfg.CurrentContext = name
	return clientcmd.Write(*cfg)
}

// AdminKubeconfig is a kubeconfig for AdminConfig (direct, not proxied).
func (c *Cluster) AdminKubeconfig() []byte { return c.env.KubeConfig }

// GatewayConfig is a client configuration equivalent to GatewayKubeconfig.
func (c *Cluster) GatewayConfig() *rest.Config {
	return &rest.Config{
		Host:            c.ServerURL(),
		BearerToken:     c.gatewayToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData()},
	}
}

// SetReachable cuts (false) or restores (true) the gateway's network path to
// the API server. The cluster itself keeps running.
func (c *Cluster) SetReachable(reachable bool) { c.proxy.setCut(!reachable) }

// SetFrozen freezes the gateway's path to the API server (or thaws it): its
// connections stay open and nothing passes, as when kube-apiserver is
// stopped with SIGSTOP; thawed, what waited passes on.
func (c *Cluster) SetFrozen(frozen bool) { c.proxy.setFrozen(frozen) }

// RestartAPIServer stops and starts kube-apiserver in place: same address,
// certificates, users and data, so every credential stays valid.
func (c *Cluster) RestartAPIServer() error {
	apiServer := c.env.ControlPlane.GetAPIServer()
	if err := apiServer.Stop(); err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	if err := apiServer.Start(); err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	return nil
}

// Start brings up one cluster from spec: etcd and kube-apiserver, the
// namespaces, RBAC and token for the gateway, the spec's objects,
// kube-controller-manager, the provisioner and resizer for its drivers, and
// for its plugin drivers the plugins, their sidecars and the snapshot API.
func Start(ctx context.Context, spec Spec) (_ *Cluster, err error) {
	quietKubernetesLogs()
	bins, err := ControlPlaneBinaries(ctx)
	if err != nil {
		return nil, err
	}
	workDir, lock, err := newWorkDir(spec.Environment.ID)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Spec: spec, workDir: workDir, workDirLock: lock}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	certDir, dataDir, launchers := filepath.Join(workDir, "apiserver"), filepath.Join(workDir, "etcd"), filepath.Join(workDir, "bin")
	for _, dir := range []string{certDir, dataDir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
	}
	if err := linkLaunchers(launchers, bins); err != nil {
		return nil, fmt.Errorf("control-plane launchers: %w", err)
	}

	// Everything lives in the work directory; a fixed cert dir keeps
	// certificates and the service-account signing key across
	// RestartAPIServer. kube-apiserver has been seen to ignore SIGTERM for
	// over 25 s: Stop kills it after 10.
	c.env = &envtest.Environment{
		BinaryAssetsDirectory:    bins,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  10 * time.Second,
		// Its own scheme: envtest walks the scheme's types while starting,
		// and the provisioner library writes client-go's global one, so
		// clusters started side by side (StartAll) would race on it.
		Scheme: runtime.NewScheme(),
	}
	c.env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(launchers, "etcd"), DataDir: dataDir}
	c.env.ControlPlane.APIServer = &envtest.APIServer{Path: filepath.Join(launchers, "kube-apiserver"), CertDir: certDir}
	// Close open watches promptly on SIGTERM; otherwise graceful shutdown
	// waits for every controller's watch stream and a restart takes minutes.
	c.env.ControlPlane.APIServer.Configure().Set("shutdown-watch-termination-grace-period", "2s")
	if len(spec.plugins()) > 0 {
		// The snapshot API the plugins' sidecars serve, established before
		// the spec's objects (VolumeSnapshotClasses among them) are applied,
		// and the API the resizer reads tiers from.
		paths, err := snapshotCRDPaths(ctx)
		if err != nil {
			return nil, err
		}
		c.env.CRDInstallOptions = envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}
		c.env.ControlPlane.APIServer.Configure().Append("runtime-config", resizerAPI)
	}
	c.admin, err = c.env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane for %s: %w", spec.Environment.ID, err)
	}
	c.client, err = kubernetes.NewForConfig(c.admin)
	if err != nil {
		return nil, err
	}
	apiURL, err := url.Parse(c.admin.Host)
	if err != nil {
		return nil, err
	}
	c.proxy, err = newProxy(apiURL.Host)
	if err != nil {
		return nil, err
	}

	if c.gatewayToken, err = GrantGateway(ctx, c.client, spec.Environment.Namespaces()); err != nil {
		return nil, err
	}
	if err := c.applyObjects(ctx); err != nil {
		return nil, err
	}
	// Everything that runs beside the control plane ends with runCtx.
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	kubeconfig, err := c.writeAdminKubeconfig()
	if err != nil {
		return nil, err
	}
	if err := c.startControllerManager(runCtx, bins, kubeconfig); err != nil {
		return nil, err
	}
	if err := c.startPlugins(runCtx, kubeconfig); err != nil {
		return nil, err
	}
	if err := c.startEmulatedDrivers(runCtx, kubeconfig); err != nil {
		return nil, err
	}
	return c, nil
}

// StartAll starts one cluster per spec concurrently. On error every cluster
// already started is stopped.
func StartAll(ctx context.Context, specs []Spec) ([]*Cluster, error) {
	clusters := make([]*Cluster, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() { clusters[i], errs[i] = Start(ctx, s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		StopAll(clusters)
		return nil, err
	}
	return clusters, nil
}

// StopAll stops clusters (nil ones skipped) in parallel: each may wait
// seconds for its processes to exit.
func StopAll(clusters []*Cluster) {
	var wg sync.WaitGroup
	for _, c := range clusters {
		if c != nil {
			wg.Go(c.Stop)
		}
	}
	wg.Wait()
}

// applyObjects creates every object in the cluster file (after GrantGateway
// made the namespaces they may live in).
func (c *Cluster) applyObjects(ctx context.Context) error {
	cl, err := client.New(c.admin, client.Options{})
	if err != nil {
		return err
	}
	for i := range c.Spec.Cluster.Objects {
		obj := c.Spec.Cluster.Objects[i].DeepCopy()
		if err := cl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// GrantGateway prepares any cluster (harness or kind) for the gateway: the
// namespaces, a ServiceAccount with least privilege — claims, their events
// and quotas in the given namespaces; read-only storage classes, CSI drivers,
// capacities, snapshot classes and attributes classes cluster-wide, the
// kube-system namespace (the cluster's identity) — and a
// token minted through the TokenRequest API, which it returns. It is
// idempotent.
func GrantGateway(ctx context.Context, client kubernetes.Interface, namespaces []string) (string, error) {
	for _, ns := range append(slices.Clone(namespaces), GatewayNamespace) {
		if err := createIgnoreExisting(ctx, client.CoreV1().Namespaces().Create,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return "", fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	rbac := client.RbacV1()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: GatewayServiceAccount, Namespace: GatewayNamespace}}
	if err := createIgnoreExisting(ctx, client.CoreV1().ServiceAccounts(GatewayNamespace).Create, sa); err != nil {
		return "", err
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: GatewayServiceAccount, Namespace: GatewayNamespace}}
	read := []string{"get", "list", "watch"}

	clusterRole := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayRole},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"storage.k8s.io"},
			Resources: []string{"storageclasses", "csidrivers", "csistoragecapacities"},
			Verbs:     read,
		}, {
			APIGroups: []string{"storage.k8s.io"},
			Resources: []string{"volumeattributesclasses"},
			Verbs:     []string{"list"},
		}, {
			APIGroups: []string{"snapshot.storage.k8s.io"},
			Resources: []string{"volumesnapshotclasses"},
			Verbs:     []string{"list"},
		}, {
			APIGroups:     []string{""},
			Resources:     []string{"namespaces"},
			ResourceNames: []string{"kube-system"},
			Verbs:         []string{"get"},
		}},
	}
	if err := createIgnoreExisting(ctx, rbac.ClusterRoles().Create, clusterRole); err != nil {
		return "", err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: gatewayRole},
		Subjects:   subject,
	}
	if err := createIgnoreExisting(ctx, rbac.ClusterRoleBindings().Create, binding); err != nil {
		return "", err
	}
	for _, ns := range namespaces {
		if err := grantNamespace(ctx, client, ns, subject); err != nil {
			return "", err
		}
	}
	ttl := int64(gatewayTokenTTL / time.Second)
	tr, err := client.CoreV1().ServiceAccounts(GatewayNamespace).CreateToken(ctx, GatewayServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s: %w", GatewayServiceAccount, err)
	}
	return tr.Status.Token, nil
}

// grantNamespace gives subject what the gateway needs in namespace ns:
// claims, their events, quotas and snapshots.
func grantNamespace(ctx context.Context, client kubernetes.Interface, ns string, subject []rbacv1.Subject) error {
	read := []string{"get", "list", "watch"}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayRole, Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"},
				Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events", "resourcequotas"}, Verbs: read},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: read},
			{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"},
				Verbs: []string{"get", "list", "watch", "create", "delete"}},
		},
	}
	if err := createIgnoreExisting(ctx, client.RbacV1().Roles(ns).Create, role); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayRole, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: gatewayRole},
		Subjects:   subject,
	}
	return createIgnoreExisting(ctx, client.RbacV1().RoleBindings(ns).Create, rb)
}

// startControllerManager runs kube-controller-manager with the volume
// controllers and a one-second binder resync.
func (c *Cluster) startControllerManager(ctx context.Context, bins, kubeconfig string) error {
	return c.runProcess(ctx, "kube-controller-manager", nil, filepath.Join(bins, "kube-controller-manager"),
		"--kubeconfig="+kubeconfig,
		"--controllers="+volumeControllers,
		"--leader-elect=false",
		"--secure-port=0",
		"--pvclaimbinder-sync-period=1s",
		"--resource-quota-sync-period=5s",
	)
}

// writeAdminKubeconfig writes the admin kubeconfig the cluster's own
// processes use into the work directory, and returns its path.
func (c *Cluster) writeAdminKubeconfig() (string, error) {
	kubeconfig := filepath.Join(c.workDir, "admin.kubeconfig")
	return kubeconfig, os.WriteFile(kubeconfig, c.env.KubeConfig, 0o600)
}

// runProcess runs one of the cluster's processes beside its control plane
// until ctx ends, logging to name.log in the work directory.
func (c *Cluster) runProcess(ctx context.Context, name string, env []string, path string, args ...string) error {
	logFile, err := os.Create(filepath.Join(c.workDir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// On cancel: SIGTERM, then SIGKILL if it has not exited within 10 s.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := BindToParent(cmd, syscall.SIGKILL); err != nil {
		_ = logFile.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.wg.Go(func() { _ = cmd.Wait(); _ = logFile.Close() })
	return nil
}

// Stop tears the cluster down and removes its work directory. It is safe to
// call more than once and on a partly started cluster.
func (c *Cluster) Stop() {
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
		c.cancel = nil
	}
	if c.proxy != nil {
		c.proxy.close()
		c.proxy = nil
	}
	if c.env != nil {
		_ = c.env.Stop()
		c.env = nil
	}
	if c.workDir != "" {
		_ = os.RemoveAll(c.workDir)
		c.workDir = ""
	}
	if c.workDirLock != nil {
		_ = c.workDirLock.Close()
		c.workDirLock = nil
	}
}

func createIgnoreExisting[T any](ctx context.Context, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T) error {
	if _, err := create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// RemoveNamespace deletes ns, if it exists, and waits (up to two minutes)
// until the namespace controller has removed it, so a test can create it
// afresh.
func (c *Cluster) RemoveNamespace(t testing.TB, ns string) {
	t.Helper()
	namespaces := c.client.CoreV1().Namespaces()
	if err := namespaces.Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "namespace "+ns+" gone", func() bool {
		_, err := namespaces.Get(t.Context(), ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
