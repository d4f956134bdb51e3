package volumes

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/dcm-project/storage-gateway/internal/fault"
)

// kubernetesError classifies an API server's answer to a write of a
// claim (KubernetesError).
func kubernetesError(err error, action string) error { return KubernetesError(err, "claim", action) }

// KubernetesError classifies an API server's answer to a write of an
// object (a claim, a snapshot) into the answers the API contract
// (internal/api/openapi.yaml) declares: a client mistake is never a bare
// 500. Messages are the gateway's own; an Invalid answer contributes only
// the field paths it names.
func KubernetesError(err error, object, action string) error {
	var netErr net.Error
	switch {
	case apierrors.IsInvalid(err):
		return fault.Invalid("spec", "the cluster rejected the %s: invalid %s", object, invalidFields(err))
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		return fault.New(fault.Conflict, "the namespace's ResourceQuota on requests.storage would be exceeded")
	case apierrors.IsForbidden(err):
		return fault.New(fault.FailedPrecondition, "the gateway's credentials may not %s in this environment", action)
	case apierrors.IsNotFound(err):
		return fault.New(fault.FailedPrecondition, "could not %s: the namespace or %s does not exist in the cluster", action, object)
	case apierrors.IsConflict(err):
		return fault.New(fault.Conflict, "the %s changed while trying to %s; retry", object, action)
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr):
		return fault.RetryLater(time.Second, "the cluster did not answer while trying to %s; retry", action)
	}
	return err
}

func invalidFields(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return "fields"
	}
	var fields []string
	for _, c := range status.Status().Details.Causes {
		if c.Field != "" {
			fields = append(fields, c.Field)
		}
	}
	if len(fields) == 0 {
		return "fields"
	}
	return strings.Join(fields, ", ")
}
