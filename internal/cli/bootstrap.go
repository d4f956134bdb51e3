package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// terminatingWait bounds how long bootstrap waits for a namespace that is
// being deleted (right after unbootstrap, say) to be gone.
const terminatingWait = 2 * time.Minute

// grant makes what the gateway needs in the cluster — all of it or, on any
// failure, nothing: a preflight checks the namespaces and the admin's
// permissions before anything is written, and what this run created is
// deleted again when a later step fails (the returned undo does the same
// for the caller's later steps). Server-side apply makes a second run
// change nothing but add the namespaces not bound yet; what existed before
// is never deleted by undo. Served namespaces that do not exist are
// created only with createNamespaces.
func (t *targetCluster) grant(ctx context.Context, namespaces []string, createNamespaces bool, progress io.Writer) (undo func(), err error) {
	objs, err := targetcluster.Objects(namespaces)
	if err != nil {
		return nil, err
	}
	missing, err := t.preflight(ctx, namespaces, createNamespaces, progress)
	if err != nil {
		return nil, err
	}
	var created []*unstructured.Unstructured
	undo = func() { t.remove(context.WithoutCancel(ctx), created, progress) }
	defer func() {
		if err != nil {
			undo()
		}
	}()
	// The served namespaces that do not exist come first; only the
	// ServiceAccount's own namespace is marked as bootstrap's (unbootstrap
	// deletes it; a served namespace holds volumes and stays).
	for _, ns := range slices.Backward(missing) {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("v1")
		obj.SetKind("Namespace")
		obj.SetName(ns)
		objs = append([]*unstructured.Unstructured{obj}, objs...)
	}
	for _, obj := range objs {
		res, err := t.objects.Resource(obj, "")
		if err != nil {
			return undo, err
		}
		if obj.GetKind() == "Namespace" {
			if obj.GetName() == targetcluster.Namespace {
				obj.SetAnnotations(map[string]string{createdByBootstrap: "true"})
			}
			_, err := res.Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
			switch {
			case err == nil:
				created = append(created, obj)
			case !apierrors.IsAlreadyExists(err):
				return undo, fmt.Errorf("create namespace %s: %w", obj.GetName(), err)
			}
			continue
		}
		_, err = res.Get(ctx, obj.GetName(), metav1.GetOptions{})
		existed := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return undo, fmt.Errorf("read %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if _, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return undo, fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if !existed {
			created = append(created, obj)
		}
	}
	return undo, nil
}

// preflight waits for namespaces that are being deleted to be gone, then
// says which served namespaces are missing (refusing them unless they may
// be created) and refuses, naming each, the permissions the admin lacks to
// make what grant makes. It writes nothing.
func (t *targetCluster) preflight(ctx context.Context, namespaces []string, createNamespaces bool, progress io.Writer) (missing []string, err error) {
	saNamespaceExists := false
	for _, ns := range append([]string{targetcluster.Namespace}, namespaces...) {
		exists, err := t.namespaceExists(ctx, ns, progress)
		if err != nil {
			return nil, err
		}
		switch {
		case ns == targetcluster.Namespace:
			saNamespaceExists = saNamespaceExists || exists
		case !exists && !slices.Contains(missing, ns):
			missing = append(missing, ns)
		}
	}
	if len(missing) > 0 && !createNamespaces {
		return nil, fmt.Errorf("namespace %s does not exist in the cluster: create it first, or give --create-namespace; nothing was changed",
			strings.Join(missing, ", "))
	}
	type need struct{ verb, group, resource, subresource, namespace string }
	var needs []need
	if len(missing) > 0 || !saNamespaceExists {
		needs = append(needs, need{"create", "", "namespaces", "", ""})
	}
	for _, verb := range []string{"create", "patch"} {
		needs = append(needs, need{verb, "", "serviceaccounts", "", targetcluster.Namespace},
			need{verb, "rbac.authorization.k8s.io", "clusterroles", "", ""},
			need{verb, "rbac.authorization.k8s.io", "clusterrolebindings", "", ""})
		for _, ns := range namespaces {
			needs = append(needs, need{verb, "rbac.authorization.k8s.io", "rolebindings", "", ns})
		}
	}
	needs = append(needs, need{"create", "", "serviceaccounts", "token", targetcluster.Namespace})
	var denied []string
	for _, n := range needs {
		review, err := t.typed.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: n.verb, Group: n.group, Resource: n.resource, Subresource: n.subresource, Namespace: n.namespace}}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("ask the cluster what the admin kubeconfig may do: %w", err)
		}
		if !review.Status.Allowed {
			what := n.verb + " " + n.resource
			if n.subresource != "" {
				what += "/" + n.subresource
			}
			if n.namespace != "" {
				what += " in namespace " + n.namespace
			}
			denied = append(denied, what)
		}
	}
	if len(denied) > 0 {
		return nil, fmt.Errorf("the admin kubeconfig may not %s; use a cluster admin's kubeconfig; nothing was changed", strings.Join(denied, ", "))
	}
	return missing, nil
}

// namespaceExists reports whether ns exists, first waiting — up to
// terminatingWait, saying so — for it to be gone if it is being deleted.
func (t *targetCluster) namespaceExists(ctx context.Context, ns string, progress io.Writer) (bool, error) {
	start := time.Now()
	said := time.Time{}
	for {
		n, err := t.typed.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if !said.IsZero() {
				fmt.Fprintf(progress, "namespace %s is gone\n", ns)
			}
			return false, nil
		case apierrors.IsForbidden(err):
			return false, fmt.Errorf("the admin kubeconfig may not get namespace %s; use a cluster admin's kubeconfig; nothing was changed", ns)
		case err != nil:
			return false, err
		case n.DeletionTimestamp == nil:
			return true, nil
		case time.Since(start) > terminatingWait:
			return false, fmt.Errorf("namespace %s is still being deleted after %s (kubectl get namespace %s -o yaml says what holds it); "+
				"nothing was changed", ns, terminatingWait, ns)
		case time.Since(said) >= 10*time.Second:
			fmt.Fprintf(progress, "waiting for namespace %s to finish terminating (%s so far, at most %s)\n", ns,
				time.Since(start).Round(time.Second), terminatingWait)
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// remove deletes objs, last first, saying so (undoing a failed grant).
func (t *targetCluster) remove(ctx context.Context, objs []*unstructured.Unstructured, progress io.Writer) {
	for i := len(objs) - 1; i >= 0; i-- {
		obj := objs[i]
		res, err := t.objects.Resource(obj, "")
		if err == nil {
			err = res.Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(progress, "could not remove %s %s: %v (remove it by hand, or run env unbootstrap)\n", obj.GetKind(), obj.GetName(), err)
			continue
		}
		fmt.Fprintf(progress, "removed %s %s, created by this run\n", obj.GetKind(), qualified(obj))
	}
}

func qualified(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() != "" {
		return obj.GetNamespace() + "/" + obj.GetName()
	}
	return obj.GetName()
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
	createNamespace     bool
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
			"gateway. It is all or nothing: the namespaces and your permissions are checked before anything is written, and\n" +
			"what it created is removed if a later step fails. --rotate mints a new token and rotates it in. Run again with\n" +
			"more --allowed-namespaces to bind them (the environment is updated).",
		Example: "  storage-gateway env bootstrap east --kubeconfig ~/.kube/config --context east-admin --namespace dcm-volumes\n" +
			"  storage-gateway env bootstrap east --kubeconfig ~/.kube/config --namespace dcm-volumes --create-namespace\n" +
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
			undo, err := target.grant(ctx, namespaces, f.createNamespace, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			err = func() error {
				token, err := target.mintToken(ctx, f.tokenTTL)
				if err != nil {
					return err
				}
				if in.Credentials, err = target.credentials(token); err != nil {
					return err
				}
				return c.apply(cmd, id, in)
			}()
			var unreachable *unreachableError
			switch {
			case errors.As(err, &unreachable) && unreachable.sent:
				// The gateway may hold the environment now: its credentials
				// must stay. The admin finds out which it is.
				return fmt.Errorf("%w; if `storage-gateway env get %s` does not find it, run env unbootstrap", err, id)
			case err != nil:
				fmt.Fprintln(cmd.ErrOrStderr(), "env bootstrap failed after changing the cluster; undoing what this run created:")
				undo()
				return err
			}
			return nil
		},
	}
	spec.register(cmd)
	f.register(cmd)
	cmd.Flags().BoolVar(&f.rotate, "rotate", false, "mint a new token and rotate it into the registered environment")
	cmd.Flags().BoolVar(&f.createNamespace, "create-namespace", false,
		"create the served namespaces that do not exist yet (unbootstrap leaves them: they hold the volumes)")
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
