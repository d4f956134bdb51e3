package harness

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RestrictedToken mints a token for ServiceAccount name (in GatewayNamespace)
// that holds exactly rules, cluster-wide — to test how the gateway reacts to
// credentials that lack permissions. It is idempotent per name.
func (c *Cluster) RestrictedToken(ctx context.Context, name string, rules []rbacv1.PolicyRule) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: GatewayNamespace}}
	if err := createIgnoreExisting(ctx, c.client.CoreV1().ServiceAccounts(GatewayNamespace).Create, sa); err != nil {
		return "", err
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "restricted-" + name}, Rules: rules}
	if err := createIgnoreExisting(ctx, c.client.RbacV1().ClusterRoles().Create, role); err != nil {
		return "", err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "restricted-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: GatewayNamespace}},
	}
	if err := createIgnoreExisting(ctx, c.client.RbacV1().ClusterRoleBindings().Create, binding); err != nil {
		return "", err
	}
	ttl := int64(gatewayTokenTTL / time.Second)
	tr, err := c.client.CoreV1().ServiceAccounts(GatewayNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s: %w", name, err)
	}
	return tr.Status.Token, nil
}

// NewGatewayToken mints another token for the gateway's ServiceAccount, as an
// admin rotating credentials would.
func (c *Cluster) NewGatewayToken(ctx context.Context) (string, error) {
	return GrantGateway(ctx, c.client, c.Spec.Environment.Namespaces())
}
