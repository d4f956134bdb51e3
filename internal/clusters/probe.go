package clusters

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"

	"github.com/dcm-project/storage-gateway/internal/egress"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// HealthState is a cluster's health as the gateway sees it: through a probe
// of its credentials (all five) or through its live connection (pending,
// ready, degraded, unreachable). An environment's recorded state
// (environments.State) is taken from it.
type HealthState string

// The health states; their values are the environment states' (the API
// contract's EnvironmentState).
const (
	HealthPending      HealthState = "PENDING"
	HealthReady        HealthState = "READY"
	HealthDegraded     HealthState = "DEGRADED"
	HealthUnreachable  HealthState = "UNREACHABLE"
	HealthUnauthorized HealthState = "UNAUTHORIZED"
)

// Permission is one access the gateway needs in a cluster: to every
// object of the resource, or only to the one Name says.
type Permission struct {
	Verb, Group, Resource, Namespace, Name string
}

func (p Permission) String() string {
	res := p.Resource
	if p.Group != "" {
		res += "." + p.Group
	}
	if p.Name != "" {
		res += " " + p.Name
	}
	if p.Namespace == "" {
		return p.Verb + " " + res
	}
	return p.Verb + " " + res + " in namespace " + p.Namespace
}

// RequiredPermissions lists what the gateway needs: full PVC lifecycle and
// watching events in each namespace it may place volumes in, and read access
// to StorageClasses, CSIDrivers and CSIStorageCapacities — everything the
// cluster pool's caches list and watch, so a cluster that passes the probe
// can sync.
func RequiredPermissions(namespaces []string) []Permission {
	var perms []Permission
	for _, ns := range namespaces {
		for _, verb := range []string{"create", "get", "list", "watch", "patch", "delete"} {
			perms = append(perms, Permission{Verb: verb, Resource: "persistentvolumeclaims", Namespace: ns})
		}
		for _, verb := range []string{"list", "watch"} {
			perms = append(perms, Permission{Verb: verb, Resource: "events", Namespace: ns})
		}
	}
	for _, verb := range []string{"get", "list", "watch"} {
		perms = append(perms, Permission{Verb: verb, Group: "storage.k8s.io", Resource: "storageclasses"})
	}
	for _, res := range []string{"csidrivers", "csistoragecapacities"} {
		for _, verb := range []string{"list", "watch"} {
			perms = append(perms, Permission{Verb: verb, Group: "storage.k8s.io", Resource: res})
		}
	}
	return perms
}

// OptionalPermissions lists what the gateway uses where it may but does
// without (the probe does not ask for it): listing the ResourceQuotas of
// its namespaces, for placement's quota headroom, and the cluster's
// VolumeSnapshotClasses and VolumeAttributesClasses, for which classes can
// be snapshotted and which performance tiers exist (each unknown without);
// the VolumeSnapshots of its namespaces, which the snapshot API makes
// (refused with the cluster's answer without); and the kube-system
// namespace, whose uid identifies the cluster (its address does without).
func OptionalPermissions(namespaces []string) []Permission {
	perms := make([]Permission, 0, 6*len(namespaces)+3)
	for _, ns := range namespaces {
		perms = append(perms, Permission{Verb: "list", Resource: "resourcequotas", Namespace: ns})
		for _, verb := range []string{"create", "get", "list", "watch", "delete"} {
			perms = append(perms, Permission{Verb: verb, Group: "snapshot.storage.k8s.io", Resource: "volumesnapshots", Namespace: ns})
		}
	}
	return append(perms,
		Permission{Verb: "list", Group: "snapshot.storage.k8s.io", Resource: "volumesnapshotclasses"},
		Permission{Verb: "list", Group: "storage.k8s.io", Resource: "volumeattributesclasses"},
		Permission{Verb: "get", Resource: "namespaces", Name: clusterIdentityNamespace})
}

// ProbeResult is what one probe learned. Message is written by the gateway
// (never copied from the API server) and safe to show to any admin.
type ProbeResult struct {
	State             HealthState
	Message           string
	KubernetesVersion string
	// StorageClassCount is nil when the classes could not be listed.
	StorageClassCount *int
	// ClusterID is the cluster's identity (see clusterID); empty when the
	// probe did not get that far.
	ClusterID string
	Time      time.Time
}

// probeQPS and probeBurst are a probe's rate limit when there are no shared
// Limiters (offline tools). A probe sends a rules review per namespace and,
// against an authorizer that cannot list rules, up to one access review per
// permission — 271 at the limit of 32 allowed namespaces besides the
// default — which must fit in its timeout; client-go's default of 5 per
// second would not.
const (
	probeQPS   = 100
	probeBurst = 200
)

// ProberOptions configure a Prober.
type ProberOptions struct {
	// Client holds the egress policy.
	Client ClientOptions
	// Timeout bounds one probe, once it runs, plus the time its requests
	// wait for the environment's rate limiter.
	Timeout time.Duration
	// Limiters, when set, give each environment's probes the rate limiter
	// its pool connection uses.
	Limiters *Limiters
	// Concurrency caps probes in flight across every environment (default
	// 8); further probes wait their turn, as long as their caller's context
	// lets them.
	Concurrency int
}

// Prober checks that a cluster is reachable with the given credentials and
// that they grant what the gateway needs.
type Prober struct {
	opts  ProberOptions
	slots chan struct{}
}

// NewProber returns a Prober.
func NewProber(opts ProberOptions) *Prober {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	return &Prober{opts: opts, slots: make(chan struct{}, opts.Concurrency)}
}

// Probe runs GET /version, then checks the required permissions (one
// SelfSubjectRulesReview per namespace, see missingPermissions), then counts
// StorageClasses. It never returns an error: every
// failure becomes a state and a message.
func (p *Prober) Probe(ctx context.Context, environmentID string, conn kubeconfig.Connection, namespaces []string) ProbeResult {
	res := ProbeResult{Time: time.Now().UTC()}
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	case <-ctx.Done():
		res.State, res.Message = HealthUnreachable, "the probe was cancelled while waiting for other probes to finish"
		return res
	}
	perms := RequiredPermissions(namespaces)
	timeout := p.opts.Timeout
	opts := p.opts.Client
	opts.Use = "probe"
	opts.Timeout = p.opts.Timeout
	opts.MaxResponseBytes = maxResponseBytes
	if p.opts.Limiters != nil {
		opts.RateLimiter = p.opts.Limiters.forEnvironment(environmentID)
		// At most: every rules review, an access review per permission,
		// /version, StorageClasses and the cluster's identity.
		timeout += opts.RateLimiter.waitFor(len(namespaces) + len(perms) + 3)
	} else if opts.QPS == 0 {
		opts.QPS, opts.Burst = probeQPS, probeBurst
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	client, err := NewClient(conn, opts)
	if err != nil {
		res.State, res.Message = HealthUnreachable, "the connection settings cannot be used: "+err.Error()
		return res
	}
	defer client.Close()

	info, err := client.Discovery().ServerVersion()
	if err != nil {
		res.State, res.Message = classify(ctx, err, p.opts.Timeout)
		return res
	}
	// The version is the cluster's own text, stored and shown to admins:
	// only a plausible version string is kept.
	if len(info.GitVersion) <= maxVersionLength && validVersion.MatchString(info.GitVersion) {
		res.KubernetesVersion = info.GitVersion
	}

	missing, err := missingPermissions(ctx, client, namespaces, perms)
	if err != nil {
		res.State, res.Message = classify(ctx, err, p.opts.Timeout)
		return res
	}
	if len(missing) > 0 {
		res.State, res.Message = HealthUnauthorized, describeMissing(missing)
		return res
	}
	classes, err := client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		_, why := classify(ctx, err, p.opts.Timeout)
		res.State, res.Message = HealthDegraded, "permissions granted, but listing StorageClasses failed: "+why
		return res
	}
	n := len(classes.Items)
	res.StorageClassCount = &n
	res.ClusterID = clusterID(ctx, client, conn.Server)
	res.State = HealthReady
	res.Message = "reachable; all required permissions granted"
	if res.KubernetesVersion == "" {
		res.Message += "; the API server reported no valid version"
	}
	return res
}

// clusterID names the cluster the credentials reach, the same whichever
// address or credentials reach it: the uid of its kube-system namespace,
// which the API server gives that namespace when the cluster is made and
// never changes. Credentials that may not read it (the permission is
// optional, see OptionalPermissions) fall back to the API server's
// address, which tells apart every cluster but not two addresses of one.
func clusterID(ctx context.Context, client *Client, server string) string {
	ns, err := client.CoreV1().Namespaces().Get(ctx, clusterIdentityNamespace, metav1.GetOptions{})
	if err != nil || ns.UID == "" {
		return "server/" + strings.ToLower(server)
	}
	return clusterIdentityNamespace + "/" + string(ns.UID)
}

// clusterIdentityNamespace is the namespace whose uid identifies a
// cluster: every cluster has it from its first start.
const clusterIdentityNamespace = "kube-system"

// validVersion is a Kubernetes gitVersion as real distributions report it
// (v1.36.3, v1.30.2-eks-1234567, v1.29.4+k3s1); maxVersionLength bounds it.
const maxVersionLength = 64

var validVersion = regexp.MustCompile(`^v?[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,6}([-+][0-9A-Za-z.+_-]{1,48})?$`)

// missingPermissions asks the cluster which permissions the credentials
// lack. One SelfSubjectRulesReview per namespace lists what they may do
// there — the namespace's role bindings and every cluster role binding, so
// the first namespace's rules also judge the cluster-scoped permissions —
// and is a request per namespace where one access review per permission
// was fifteen. Only a permission the rules do not grant while a review is
// incomplete (an authorizer besides RBAC, a webhook say, may still allow
// it) is asked directly with a SelfSubjectAccessReview. The order of the
// result follows perms.
func missingPermissions(ctx context.Context, client *Client, namespaces []string, perms []Permission) ([]Permission, error) {
	reviews := make([]authorizationv1.SubjectRulesReviewStatus, len(namespaces))
	err := concurrently(len(namespaces), func(i int) error {
		review := &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespaces[i]}}
		got, err := client.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil {
			reviews[i] = got.Status
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	allowed := make([]bool, len(perms))
	var unsure []int
	for i, perm := range perms {
		review := reviews[max(0, slices.Index(namespaces, perm.Namespace))]
		allowed[i] = grants(review.ResourceRules, perm)
		if !allowed[i] && review.Incomplete {
			unsure = append(unsure, i)
		}
	}
	err = concurrently(len(unsure), func(j int) error {
		perm := perms[unsure[j]]
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: perm.Namespace, Verb: perm.Verb, Group: perm.Group, Resource: perm.Resource,
			},
		}}
		got, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil {
			allowed[unsure[j]] = got.Status.Allowed
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var missing []Permission
	for i, ok := range allowed {
		if !ok {
			missing = append(missing, perms[i])
		}
	}
	return missing, nil
}

// grants reports whether rules allow perm on every object of its kind, as
// RBAC evaluates them (wildcards, and no resource-name restriction).
func grants(rules []authorizationv1.ResourceRule, perm Permission) bool {
	owned := make([]rbacv1.PolicyRule, len(rules))
	for i, r := range rules {
		owned[i] = rbacv1.PolicyRule{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames}
	}
	wanted := rbacv1.PolicyRule{Verbs: []string{perm.Verb}, APIGroups: []string{perm.Group}, Resources: []string{perm.Resource}}
	covered, _ := rbacvalidation.Covers(owned, []rbacv1.PolicyRule{wanted})
	return covered
}

// concurrently runs do(0) … do(n-1), at most 8 at once, and joins their
// errors.
func concurrently(n int, do func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = do(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func describeMissing(missing []Permission) string {
	names := make([]string, len(missing))
	for i, m := range missing {
		names[i] = m.String()
	}
	return "the credentials lack required permissions: " + strings.Join(names, ", ")
}

// classify turns a request error into a state and a message of the gateway's
// own words: API server bodies are never repeated, since they can reflect
// attacker-chosen content from a hostile endpoint.
func classify(ctx context.Context, err error, timeout time.Duration) (HealthState, string) {
	var denied *egress.DeniedError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var certInvalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var netErr net.Error
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &denied):
		return HealthUnreachable, denied.Error()
	case errors.Is(err, ErrResponseTooLarge):
		return HealthUnreachable, "the API server sent an answer larger than the gateway accepts"
	case errors.Is(err, egress.ErrRedirect):
		return HealthUnreachable, "the API server answered with a redirect; redirects are never followed"
	// Go wraps every verification failure in a CertificateVerificationError,
	// so the specific causes are tested first and it is the fallback.
	case errors.As(err, &hostname):
		return HealthUnreachable, "TLS verification failed: the server certificate does not match the server name"
	case errors.As(err, &certInvalid):
		return HealthUnreachable, "TLS verification failed: the server certificate is invalid or expired"
	case errors.As(err, &unknownCA):
		return HealthUnreachable, "TLS verification failed: the server certificate is not signed by the configured certificate authority"
	case errors.As(err, &verify):
		return HealthUnreachable, "TLS verification failed"
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || errors.As(err, &netErr) && netErr.Timeout():
		return HealthUnreachable, fmt.Sprintf("the API server did not answer within %s", timeout)
	case errors.As(err, &status):
		return classifyStatus(status.Status().Code)
	case errors.Is(err, syscall.ECONNREFUSED):
		return HealthUnreachable, "connection refused by the API server address"
	}
	return HealthUnreachable, "the API server could not be reached"
}

func classifyStatus(code int32) (HealthState, string) {
	switch code {
	case 401:
		return HealthUnauthorized, "the API server rejected the credentials (401 Unauthorized)"
	case 403:
		return HealthUnauthorized, "the API server refused access (403 Forbidden); the credentials need get on /version and /readyz and create selfsubjectrulesreviews.authorization.k8s.io"
	}
	return HealthUnreachable, fmt.Sprintf("the API server answered with HTTP status %d", code)
}
