package harness

import (
	"context"
	"fmt"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// tenantServiceAccount is each tenant's own ServiceAccount, in its namespace.
const tenantServiceAccount = "storage-gateway"

// Tenant is one environment carved out of a shared cluster: its own
// namespace and a least-privilege token that reaches nothing else — how a
// platform team hands a namespace of a big cluster to DCM, and how the fleet
// benchmark gets a thousand environments out of two API servers.
type Tenant struct {
	Namespace string
	Token     string
}

// TenantKubeconfig is the tenant's kubeconfig for the gateway: the cluster's
// proxied server, its CA and the tenant's token.
func (c *Cluster) TenantKubeconfig(t Tenant) ([]byte, error) {
	return TokenKubeconfig(t.Namespace, c.ServerURL(), c.CAData(), t.Token, t.Namespace)
}

// DirectTenantKubeconfig is TenantKubeconfig at DirectServerURL, for fleets
// of tenants that no test cuts off: through the proxy, each connection holds
// two of the test process's file descriptors, and 10,000 environments (two
// connections each) would need more than its limit (20,000 here).
func (c *Cluster) DirectTenantKubeconfig(t Tenant) ([]byte, error) {
	return TokenKubeconfig(t.Namespace, c.DirectServerURL(), c.CAData(), t.Token, t.Namespace)
}

// Tenants creates n tenants named prefix-0000 … (idempotent per name): a
// namespace, a ServiceAccount in it with the gateway's namespace role there,
// read access to the cluster's storage objects (one ClusterRoleBinding for
// all of them) and a token. It sends up to 16 requests at once.
func (c *Cluster) Tenants(ctx context.Context, prefix string, n int) ([]Tenant, error) {
	cfg := c.AdminConfig()
	cfg.QPS, cfg.Burst = -1, 0 // a few thousand objects: the API server's own pace
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	tenants := make([]Tenant, n)
	subjects := make([]rbacv1.Subject, n)
	for i := range tenants {
		tenants[i].Namespace = fmt.Sprintf("%s-%04d", prefix, i)
		subjects[i] = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: tenantServiceAccount, Namespace: tenants[i].Namespace}
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-storage-read"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: gatewayRole},
		Subjects:   subjects,
	}
	if err := createIgnoreExisting(ctx, client.RbacV1().ClusterRoleBindings().Create, binding); err != nil {
		return nil, fmt.Errorf("tenants' storage read binding: %w", err)
	}
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range tenants {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			tenants[i].Token, errs[i] = grantTenant(ctx, client, tenants[i].Namespace, subjects[i:i+1])
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tenants[i].Namespace, err)
		}
	}
	return tenants, nil
}

func grantTenant(ctx context.Context, client kubernetes.Interface, ns string, subject []rbacv1.Subject) (string, error) {
	if err := createIgnoreExisting(ctx, client.CoreV1().Namespaces().Create,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tenantServiceAccount, Namespace: ns}}
	if err := createIgnoreExisting(ctx, client.CoreV1().ServiceAccounts(ns).Create, sa); err != nil {
		return "", err
	}
	if err := grantNamespace(ctx, client, ns, subject); err != nil {
		return "", err
	}
	ttl := int64(gatewayTokenTTL.Seconds())
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, tenantServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}
