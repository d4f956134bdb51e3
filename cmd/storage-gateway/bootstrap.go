package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	targetcluster "github.com/dcm-project/storage-gateway/deploy/target-cluster"
	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/kubeobjects"
)

// partOfSelector finds the objects bootstrap made (deploy/target-cluster
// labels every one).
const partOfSelector = "app.kubernetes.io/part-of=storage-gateway"

// fieldManager names the gateway's CLI in the objects' managed fields.
const fieldManager = "storage-gateway"

// targetCluster is a cluster to serve, reached as its admin from the
// admin's own kubeconfig — client-go's loaders, exec plugins (EKS, GKE,
// AKS) included: this runs on the admin's machine, and nothing of the
// admin's credentials is sent to the gateway.
type targetCluster struct {
	config  *rest.Config
	typed   kubernetes.Interface
	objects *kubeobjects.Client
}

func openTargetCluster(kubeconfig, context string) (*targetCluster, error) {
	if kubeconfig == "" {
		return nil, errors.New("--kubeconfig is required: the target cluster's admin kubeconfig (used here, never sent)")
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	typed, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	objects, err := kubeobjects.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return &targetCluster{config: cfg, typed: typed, objects: objects}, nil
}

// createdByBootstrap marks the ServiceAccount's namespace when bootstrap
// created it, so unbootstrap deletes only a namespace it made — never one
// that already held other things (the gateway itself, say).
const createdByBootstrap = "storage-gateway.dcm-project.io/created-by-bootstrap"

// grant applies the ServiceAccount and its RBAC (server-side apply: running
// it again changes nothing, and adds the namespaces not bound yet). The
// namespace is created when missing, and otherwise left as it is.
func (t *targetCluster) grant(ctx context.Context, namespaces []string) error {
	objs, err := targetcluster.Objects(namespaces)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		res, err := t.objects.Resource(obj, "")
		if err != nil {
			return err
		}
		if obj.GetKind() == "Namespace" {
			obj.SetAnnotations(map[string]string{createdByBootstrap: "true"})
			if _, err := res.Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create namespace %s: %w", obj.GetName(), err)
			}
			continue
		}
		if _, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// mintToken asks the cluster for a token of the ServiceAccount.
func (t *targetCluster) mintToken(ctx context.Context, ttl time.Duration) (string, error) {
	seconds := int64(ttl.Seconds())
	tr, err := t.typed.CoreV1().ServiceAccounts(targetcluster.Namespace).CreateToken(ctx, targetcluster.ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("mint a token for %s/%s: %w", targetcluster.Namespace, targetcluster.ServiceAccount, err)
	}
	return tr.Status.Token, nil
}

// credentials are what the gateway gets: the API server and its CA from
// the admin's kubeconfig, and the ServiceAccount's token.
func (t *targetCluster) credentials(token string) (*api.ClusterCredentials, error) {
	creds := &api.ClusterCredentials{Server: t.config.Host, Token: &token}
	ca := t.config.CAData
	if len(ca) == 0 && t.config.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(t.config.CAFile); err != nil {
			return nil, err
		}
	}
	if len(ca) > 0 {
		creds.CertificateAuthorityData = &ca
	}
	if t.config.ServerName != "" {
		creds.TlsServerName = &t.config.ServerName
	}
	return creds, nil
}

// revoke deletes what grant made: every RoleBinding of the volume role, the
// roles, the ServiceAccount (which ends its tokens) and its namespace if
// bootstrap created it.
func (t *targetCluster) revoke(ctx context.Context) error {
	objs, err := targetcluster.Objects(nil)
	if err != nil {
		return err
	}
	bindings, err := t.typed.RbacV1().RoleBindings(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: partOfSelector})
	if err != nil {
		return err
	}
	for _, b := range bindings.Items {
		if b.Name != targetcluster.VolumesBinding {
			continue
		}
		if err := t.typed.RbacV1().RoleBindings(b.Namespace).Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	slices.Reverse(objs) // bindings before roles, the namespace last
	for _, obj := range objs {
		res, err := t.objects.Resource(obj, "")
		if err != nil {
			return err
		}
		if obj.GetKind() == "Namespace" {
			ns, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) || err == nil && ns.GetAnnotations()[createdByBootstrap] != "true" {
				continue
			} else if err != nil {
				return err
			}
		}
		if err := res.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// bootstrapFlags are bootstrap's own settings beside the environment's.
type bootstrapFlags struct {
	kubeconfig, context string
	tokenTTL            time.Duration
	rotate              bool
}

func (c *gatewayClient) bootstrapCommand() *cobra.Command {
	var spec specFlags
	var f bootstrapFlags
	cmd := &cobra.Command{
		Use:   "bootstrap ID --kubeconfig ADMIN [--context CTX] --namespace NS",
		Short: "Create the gateway's least-privilege ServiceAccount in a cluster with your admin kubeconfig and register the environment with its token",
		Long: "bootstrap uses your admin kubeconfig here, on your machine (exec plugins included), to apply deploy/target-cluster's\n" +
			"ServiceAccount and RBAC to the cluster — one RoleBinding per namespace the environment serves — mints a token of\n" +
			"that ServiceAccount and registers the environment through the gateway's API with it. Only the token reaches the\n" +
			"gateway. --rotate mints a new token and rotates it in. Run again with more --allowed-namespaces to bind them.",
		Example: "  storage-gateway env bootstrap east --kubeconfig ~/.kube/config --context east-admin --namespace dcm-volumes\n" +
			"  storage-gateway env bootstrap east --kubeconfig ~/.kube/config --context east-admin --rotate",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := openTargetCluster(f.kubeconfig, f.context)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if f.rotate {
				token, err := target.mintToken(ctx, f.tokenTTL)
				if err != nil {
					return err
				}
				creds, err := target.credentials(token)
				if err != nil {
					return err
				}
				return c.patch(cmd, args[0], api.EnvironmentInput{Credentials: creds})
			}
			id, in, err := spec.input(cmd, args[0])
			if err != nil {
				return err
			}
			if in.Namespace == nil || *in.Namespace == "" {
				return errors.New("--namespace is required: the namespace the environment's volumes go to")
			}
			namespaces := []string{*in.Namespace}
			if in.AllowedNamespaces != nil {
				namespaces = append(namespaces, *in.AllowedNamespaces...)
			}
			if err := target.grant(ctx, namespaces); err != nil {
				return err
			}
			token, err := target.mintToken(ctx, f.tokenTTL)
			if err != nil {
				return err
			}
			if in.Credentials, err = target.credentials(token); err != nil {
				return err
			}
			return c.create(cmd, id, in)
		},
	}
	spec.register(cmd)
	f.register(cmd)
	cmd.Flags().BoolVar(&f.rotate, "rotate", false, "mint a new token and rotate it into the registered environment")
	cmd.Flags().DurationVar(&f.tokenTTL, "token-duration", 365*24*time.Hour,
		"lifetime of the minted token (the gateway reports the environment DEGRADED 7 days before it ends)")
	return cmd
}

func (f *bootstrapFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "the target cluster's admin kubeconfig (used here, never sent)")
	cmd.Flags().StringVar(&f.context, "context", "", "kubeconfig context to use")
}

func (c *gatewayClient) unbootstrapCommand() *cobra.Command {
	var f bootstrapFlags
	cmd := &cobra.Command{
		Use:   "unbootstrap --kubeconfig ADMIN [--context CTX]",
		Short: "Remove from a cluster the ServiceAccount and RBAC bootstrap created (its tokens stop working)",
		Long: "unbootstrap deletes, with your admin kubeconfig, every object bootstrap applied: the RoleBindings of every served\n" +
			"namespace, the roles, the ServiceAccount, and its namespace if bootstrap created it. Every environment registered\n" +
			"with its tokens then turns UNAUTHORIZED; remove them with `env rm` first.",
		Example: "  storage-gateway env rm east && storage-gateway env unbootstrap --kubeconfig ~/.kube/config --context east-admin",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			target, err := openTargetCluster(f.kubeconfig, f.context)
			if err != nil {
				return err
			}
			if err := target.revoke(cmd.Context()); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed the storage-gateway ServiceAccount and RBAC from %s\n", target.config.Host)
			return err
		},
	}
	f.register(cmd)
	return cmd
}
