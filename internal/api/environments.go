package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/dcm"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
)

func (h *handlers) CreateEnvironment(ctx context.Context, req CreateEnvironmentRequestObject) (CreateEnvironmentResponseObject, error) {
	if req.Body == nil {
		return nil, fault.Invalid("body", "a JSON environment is required")
	}
	reg := registration(req.Params.Id, *req.Body)
	reg.RegisteredBy = principal(ctx).Subject
	if reg.Spec.ShareNamespaces {
		noteAction(ctx, ActionCreateSharingNamespaces)
	}
	env, created, err := h.opts.Environments.Register(ctx, reg)
	if err != nil {
		return nil, err
	}
	if created {
		return CreateEnvironment201JSONResponse(h.toEnvironment(env)), nil
	}
	return CreateEnvironment200JSONResponse(h.toEnvironment(env)), nil
}

func (h *handlers) ListEnvironments(ctx context.Context, req ListEnvironmentsRequestObject) (ListEnvironmentsResponseObject, error) {
	page, err := h.opts.Environments.List(ctx, environments.ListQuery{
		Environments:  principal(ctx).Narrow(nil),
		LabelSelector: deref(req.Params.LabelSelector),
		Region:        deref(req.Params.Region),
		State:         environments.State(deref(req.Params.State)),
		MaxPageSize:   deref(req.Params.MaxPageSize),
		PageToken:     deref(req.Params.PageToken),
	})
	if err != nil {
		return nil, err
	}
	out := ListEnvironments200JSONResponse{Environments: make([]Environment, 0, len(page.Environments))}
	for _, e := range page.Environments {
		out.Environments = append(out.Environments, h.toEnvironment(e))
	}
	if page.NextPageToken != "" {
		out.NextPageToken = &page.NextPageToken
	}
	return out, nil
}

func (h *handlers) GetEnvironment(ctx context.Context, req GetEnvironmentRequestObject) (GetEnvironmentResponseObject, error) {
	env, err := h.opts.Environments.Get(ctx, req.EnvironmentId)
	if err != nil {
		return nil, err
	}
	return GetEnvironment200JSONResponse(h.toEnvironment(env)), nil
}

func (h *handlers) UpdateEnvironment(ctx context.Context, req UpdateEnvironmentRequestObject) (UpdateEnvironmentResponseObject, error) {
	body := req.JSONBody
	if body == nil {
		body = req.ApplicationMergePatchPlusJSONBody
	}
	if body == nil {
		return nil, echo.NewHTTPError(http.StatusUnsupportedMediaType, "the body must be application/merge-patch+json or application/json")
	}
	patch, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	if share, ok := (*body)["share_namespaces"].(bool); ok && share {
		noteAction(ctx, ActionUpdateSharingNamespaces)
	}
	env, err := h.opts.Environments.Update(ctx, req.EnvironmentId, patch)
	if err != nil {
		return nil, err
	}
	if env, err = h.registerAgain(ctx, env, false); err != nil {
		return nil, err
	}
	return UpdateEnvironment200JSONResponse(h.toEnvironment(env)), nil
}

func (h *handlers) DeleteEnvironment(ctx context.Context, req DeleteEnvironmentRequestObject) (DeleteEnvironmentResponseObject, error) {
	if err := h.opts.Environments.Delete(ctx, req.EnvironmentId, deref(req.Params.Force)); err != nil {
		return nil, err
	}
	return DeleteEnvironment204Response{}, nil
}

func (h *handlers) VerifyEnvironment(ctx context.Context, req VerifyEnvironmentRequestObject) (VerifyEnvironmentResponseObject, error) {
	env, err := h.opts.Environments.Verify(ctx, req.EnvironmentId)
	if err != nil {
		return nil, err
	}
	if env, err = h.registerAgain(ctx, env, false); err != nil {
		return nil, err
	}
	return VerifyEnvironment200JSONResponse(h.toEnvironment(env)), nil
}

func (h *handlers) TakeOverDCMProvider(ctx context.Context, req TakeOverDCMProviderRequestObject) (TakeOverDCMProviderResponseObject, error) {
	env, err := h.opts.Environments.Get(ctx, req.EnvironmentId)
	if err != nil {
		return nil, err
	}
	switch {
	case h.opts.DCM == nil:
		return nil, fault.New(fault.FailedPrecondition, "%s", registrationOff)
	case !env.Spec.DCM.Register:
		return nil, fault.New(fault.FailedPrecondition, "registration is off for environment %s: turn it on (dcm.register) first", env.ID)
	}
	if env, err = h.registerAgain(ctx, env, true); err != nil {
		return nil, err
	}
	return TakeOverDCMProvider200JSONResponse(h.toEnvironment(env)), nil
}

// registrationOff says why nothing is registered with DCM.
const registrationOff = "this gateway does not register environments with DCM (SG_DCM_REGISTRATION_URL is unset)"

// dcmRefreshTimeout bounds how long an admin's request waits for DCM —
// for a pass over the environment already under way, and for DCM's
// answers: what DCM does not answer in time is retried in the background.
const dcmRefreshTimeout = 5 * time.Second

// registerAgain has the environment registered with DCM now (when the
// gateway registers it: an admin's verify or update asks for it, so a
// provider name another endpoint took is taken back at once) and returns
// the environment as it is then.
func (h *handlers) registerAgain(ctx context.Context, env environments.Environment, force bool) (environments.Environment, error) {
	if h.opts.DCM == nil || !env.Spec.DCM.Register {
		return env, nil
	}
	refresh, cancel := context.WithTimeout(ctx, dcmRefreshTimeout)
	defer cancel()
	// Out of time, the request answers with the registration as it stands.
	if err := h.opts.DCM.Refresh(refresh, env, force); err != nil && refresh.Err() == nil {
		return environments.Environment{}, err
	}
	return h.opts.Environments.Get(ctx, env.ID)
}

// mergePatchAsJSON lets the generated PATCH binding decode RFC 7386 bodies:
// echo's binder only recognises application/json, and a merge patch is JSON.
func mergePatchAsJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if strings.HasPrefix(c.Request().Header.Get(echo.HeaderContentType), "application/merge-patch+json") {
			c.Request().Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		}
		return next(c)
	}
}

func registration(id string, in EnvironmentInput) environments.Registration {
	reg := environments.Registration{
		ID: id,
		Spec: environments.Spec{
			DisplayName:       deref(in.DisplayName),
			Description:       deref(in.Description),
			Labels:            deref(in.Labels),
			Region:            deref(in.Region),
			Zone:              deref(in.Zone),
			Namespace:         deref(in.Namespace),
			AllowedNamespaces: deref(in.AllowedNamespaces),
			DCM:               environments.DCMSettings{Register: true},
			ShareNamespaces:   deref(in.ShareNamespaces),
		},
		Credentials: environments.Credentials{KubeconfigContext: deref(in.KubeconfigContext)},
	}
	if d := in.Defaults; d != nil {
		reg.Spec.Defaults = environments.Defaults{
			StorageClass: deref(d.StorageClass),
			AccessMode:   string(deref(d.AccessMode)),
			VolumeMode:   string(deref(d.VolumeMode)),
		}
	}
	if o := in.CapabilityOverrides; o != nil {
		sameJSON(*o, &reg.Spec.CapabilityOverrides)
	}
	if d := in.Dcm; d != nil {
		if d.Register != nil {
			reg.Spec.DCM.Register = *d.Register
		}
		reg.Spec.DCM.ProviderName = deref(d.ProviderName)
	}
	if in.Kubeconfig != nil {
		reg.Credentials.Kubeconfig = []byte(*in.Kubeconfig)
	}
	if c := in.Credentials; c != nil {
		reg.Credentials.Explicit = environments.ExplicitCredentials{
			Server:                   c.Server,
			CertificateAuthorityData: deref(c.CertificateAuthorityData),
			TLSServerName:            deref(c.TlsServerName),
			InsecureSkipTLSVerify:    deref(c.InsecureSkipTlsVerify),
			Token:                    deref(c.Token),
			ClientCertificateData:    deref(c.ClientCertificateData),
			ClientKeyData:            deref(c.ClientKeyData),
		}.Connection()
	}
	return reg
}

// toEnvironment is the contract's form of e. A registration that is off —
// for this environment, or on this gateway — reads OFF and says which.
func (h *handlers) toEnvironment(e environments.Environment) Environment {
	c, st := e.Connection, e.Status
	out := Environment{
		Id:                e.ID,
		Path:              "environments/" + e.ID,
		DisplayName:       e.Spec.DisplayName,
		Description:       e.Spec.Description,
		Labels:            e.Spec.Labels,
		Region:            e.Spec.Region,
		Zone:              e.Spec.Zone,
		Namespace:         e.Spec.Namespace,
		AllowedNamespaces: e.Spec.AllowedNamespaces,
		Defaults: EnvironmentDefaults{
			StorageClass: optional(e.Spec.Defaults.StorageClass),
			AccessMode:   (*AccessMode)(optional(e.Spec.Defaults.AccessMode)),
			VolumeMode:   (*VolumeMode)(optional(e.Spec.Defaults.VolumeMode)),
		},
		Dcm:                 DCMSettings{Register: &e.Spec.DCM.Register, ProviderName: &e.Spec.DCM.ProviderName},
		CapabilityOverrides: sameJSON(e.Spec.CapabilityOverrides, &CapabilityOverrides{}),
		ShareNamespaces:     e.Spec.ShareNamespaces,
		Connection: ConnectionInfo{
			Server:                c.Server,
			TlsServerName:         optional(c.TLSServerName),
			CaSha256:              c.CASHA256,
			InsecureSkipTlsVerify: &c.Insecure,
			AuthType:              ConnectionInfoAuthType(c.AuthType),
			KeyId:                 c.KeyID,
			CredentialsUpdateTime: c.CredentialsUpdateTime,
			CredentialsExpireTime: c.CredentialsExpireTime,
		},
		Status: EnvironmentStatus{
			State:                EnvironmentState(st.State),
			Message:              st.Message,
			KubernetesVersion:    optional(st.KubernetesVersion),
			LastProbeTime:        st.LastProbeTime,
			LastReadyTime:        st.LastReadyTime,
			StorageClassCount:    st.StorageClassCount,
			ClusterId:            optional(st.ClusterID),
			VolumeCount:          st.VolumeCount,
			UnadoptedVolumeCount: st.UnadoptedVolumeCount,
		},
		CreateTime: e.CreateTime,
		UpdateTime: e.UpdateTime,
	}
	r := st.DCMRegistration
	switch {
	case h.opts.DCM == nil:
		r = environments.DCMRegistration{State: dcm.StateOff, Message: registrationOff}
	case !e.Spec.DCM.Register:
		r = environments.DCMRegistration{State: dcm.StateOff, Message: "registration is off for this environment (dcm.register is false)"}
	}
	if r.State != "" || r.ProviderID != "" || r.Message != "" {
		out.Status.DcmRegistration = &DCMRegistration{State: optional(r.State), ProviderId: optional(r.ProviderID), Message: optional(r.Message),
			DisplacedBy: optional(r.DisplacedBy), DisplacedTime: r.DisplacedTime, ReclaimTime: r.ReclaimTime,
			InstancesWithoutClaim: r.InstancesWithoutClaim, InstancesCheckTime: r.InstancesCheckTime}
		if len(r.InstancesWithoutClaimIDs) > 0 {
			out.Status.DcmRegistration.InstancesWithoutClaimIds = &r.InstancesWithoutClaimIDs
		}
	}
	return out
}

// sameJSON copies src into dst, types whose JSON forms are the same (the
// contract's generated types and the domain's), and returns *dst.
func sameJSON[T any](src any, dst *T) T {
	raw, err := json.Marshal(src)
	if err == nil {
		err = json.Unmarshal(raw, dst)
	}
	if err != nil {
		panic(fmt.Sprintf("api: %T and %T do not share a JSON form: %v", src, dst, err))
	}
	return *dst
}

// deref returns the value behind p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// optional maps the zero value to nil so empty fields are omitted.
func optional[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}
