package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/version"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

func (h *handlers) CreateVolume(ctx context.Context, req CreateVolumeRequestObject) (CreateVolumeResponseObject, error) {
	if req.Body == nil {
		return nil, fault.Invalid("body", "a StorageSpec is required")
	}
	spec, err := storageSpec(*req.Body)
	if err != nil {
		return nil, err
	}
	v, created, err := h.opts.Volumes.Create(ctx, req.EnvironmentId, deref(req.Params.Id), deref(req.Params.IdempotencyKey), volumeRequest(spec))
	if err != nil {
		return nil, err
	}
	noteVolume(ctx, v.ID)
	if created {
		if p, _ := auth.FromContext(ctx); h.opts.DCM != nil && p.HasAny([]auth.Role{auth.RoleDCM}) {
			h.opts.DCM.CheckRecord(req.EnvironmentId, v.ID)
		}
		return CreateVolume201JSONResponse(toVolume(v)), nil
	}
	return CreateVolume200JSONResponse(toVolume(v)), nil
}

// storageSpec takes the spec out of either request shape: the
// service-provider-manager wraps it in {"spec": ...}, the environment agent
// sends it bare. The contract's oneOf has already told them apart.
func storageSpec(body VolumeCreateBody) (StorageSpec, error) {
	raw, err := body.MarshalJSON()
	if err != nil {
		return StorageSpec{}, err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return StorageSpec{}, fault.Invalid("body", "must be a JSON object")
	}
	if _, wrapped := probe["spec"]; wrapped {
		w, err := body.AsVolumeCreateRequest()
		return w.Spec, err
	}
	return body.AsStorageSpec()
}

func volumeRequest(s StorageSpec) volumes.Request {
	r := volumes.Request{Name: s.Metadata.Name, Labels: deref(s.Metadata.Labels), Capacity: s.Capacity}
	if s.ProviderHints != nil && s.ProviderHints.Kubernetes != nil {
		k := s.ProviderHints.Kubernetes
		r.Hints = volumes.Hints{
			StorageClass: deref(k.StorageClass),
			AccessMode:   string(deref(k.AccessMode)),
			VolumeMode:   string(deref(k.VolumeMode)),
			Namespace:    deref(k.Namespace),
		}
		if src := k.Source; src != nil {
			r.Hints.Source = &volumes.Source{Snapshot: deref(src.Snapshot), Volume: deref(src.Volume)}
		}
	}
	return r
}

func (h *handlers) ListVolumes(ctx context.Context, req ListVolumesRequestObject) (ListVolumesResponseObject, error) {
	page, err := h.opts.Volumes.List(ctx, req.EnvironmentId, deref(req.Params.MaxPageSize), deref(req.Params.PageToken))
	if err != nil {
		return nil, err
	}
	return ListVolumes200JSONResponse(toVolumeList(page)), nil
}

func toVolumeList(page volumes.Page) VolumeList {
	out := VolumeList{Volumes: make([]Volume, 0, len(page.Volumes))}
	for _, v := range page.Volumes {
		out.Volumes = append(out.Volumes, toVolume(v))
	}
	out.NextPageToken = optional(page.NextPageToken)
	return out
}

func (h *handlers) GetVolume(ctx context.Context, req GetVolumeRequestObject) (GetVolumeResponseObject, error) {
	v, err := h.opts.Volumes.Get(ctx, req.EnvironmentId, req.VolumeId)
	if err != nil {
		return nil, err
	}
	return GetVolume200JSONResponse(toVolume(v)), nil
}

func (h *handlers) UpdateVolume(ctx context.Context, req UpdateVolumeRequestObject) (UpdateVolumeResponseObject, error) {
	body := req.JSONBody
	if body == nil {
		body = req.ApplicationMergePatchPlusJSONBody
	}
	if body == nil {
		return nil, echo.NewHTTPError(http.StatusUnsupportedMediaType, "the body must be application/json or application/merge-patch+json")
	}
	v, err := h.opts.Volumes.Expand(ctx, req.EnvironmentId, req.VolumeId, body.Capacity)
	if err != nil {
		return nil, err
	}
	return UpdateVolume200JSONResponse(toVolume(v)), nil
}

func (h *handlers) RetierVolume(ctx context.Context, req RetierVolumeRequestObject) (RetierVolumeResponseObject, error) {
	if req.Body == nil {
		return nil, fault.Invalid("body", `{"tier": NAME} is required`)
	}
	v, err := h.opts.Volumes.Retier(ctx, req.EnvironmentId, req.VolumeId, req.Body.Tier)
	if err != nil {
		return nil, err
	}
	return RetierVolume200JSONResponse(toVolume(v)), nil
}

func (h *handlers) DeleteVolume(ctx context.Context, req DeleteVolumeRequestObject) (DeleteVolumeResponseObject, error) {
	if err := h.opts.Volumes.Delete(ctx, req.EnvironmentId, req.VolumeId); err != nil {
		return nil, err
	}
	return DeleteVolume204Response{}, nil
}

func (h *handlers) GetVolumesHealth(ctx context.Context, req GetVolumesHealthRequestObject) (GetVolumesHealthResponseObject, error) {
	healthy, message, err := h.opts.Volumes.Health(ctx, req.EnvironmentId)
	if err != nil {
		return nil, err
	}
	body := ProviderHealth{
		Type:    ProviderHealthTypeStorage,
		Path:    "environments/" + req.EnvironmentId + "/volumes/health",
		Status:  Healthy,
		Version: version.Get().Version,
		Uptime:  int(time.Since(h.opts.StartTime).Seconds()),
	}
	body.Message = &message
	if healthy {
		return GetVolumesHealth200JSONResponse(body), nil
	}
	body.Status = Unhealthy
	if h.opts.HealthUnhealthyCode == http.StatusServiceUnavailable {
		return GetVolumesHealth503JSONResponse(body), nil
	}
	return GetVolumesHealth200JSONResponse(body), nil
}

func toVolume(v volumes.Volume) Volume {
	s := v.Spec
	labels := s.Labels
	return Volume{
		Id:            v.ID,
		Path:          "environments/" + v.EnvironmentID + "/volumes/" + v.ID,
		EnvironmentId: v.EnvironmentID,
		Spec: StorageSpec{
			ServiceType: StorageSpecServiceTypeStorage,
			Capacity:    s.Capacity,
			Metadata: StorageMetadata{
				Name:         s.Name,
				Labels:       &labels,
				Namespace:    optional(s.Namespace),
				StorageClass: optional(s.StorageClass),
				VolumeName:   optional(v.VolumeName),
			},
			ProviderHints: &StorageSpec_ProviderHints{Kubernetes: &KubernetesHints{
				StorageClass: optional(s.StorageClass),
				AccessMode:   (*AccessMode)(optional(s.AccessMode)),
				VolumeMode:   (*VolumeMode)(optional(s.VolumeMode)),
				Namespace:    optional(s.Namespace),
				Source:       volumeSource(s.Source),
			}},
		},
		Status:        VolumeStatus(v.Status),
		StatusMessage: v.Message,
		CreateTime:    v.CreateTime,
		UpdateTime:    v.UpdateTime,
		Tier:          volumeTier(v.Tier),
	}
}

// volumeTier is the contract's form of a volume's tier.
func volumeTier(t *volumes.Tier) *VolumeTier {
	if t == nil {
		return nil
	}
	return &VolumeTier{Requested: t.Requested, Current: optional(t.Current), Status: (*VolumeTierStatus)(optional(t.Status)), Message: optional(t.Message)}
}

// volumeSource is the contract's form of what a volume was filled from.
func volumeSource(src *volumes.Source) *VolumeSource {
	if src == nil {
		return nil
	}
	return &VolumeSource{Snapshot: optional(src.Snapshot), Volume: optional(src.Volume)}
}

func (h *handlers) AdoptVolumes(ctx context.Context, req AdoptVolumesRequestObject) (AdoptVolumesResponseObject, error) {
	var in AdoptionRequest
	if req.Body != nil {
		in = *req.Body
	}
	if deref(in.TakeOver) && !deref(in.ValidateOnly) {
		noteAction(ctx, ActionAdoptTakingOver)
	}
	a, err := h.opts.Volumes.Adopt(ctx, req.EnvironmentId, deref(in.Namespace), deref(in.ValidateOnly), deref(in.TakeOver))
	if err != nil {
		return nil, err
	}
	out := Adoption{EnvironmentId: req.EnvironmentId, ValidateOnly: deref(in.ValidateOnly), Namespaces: a.Namespaces,
		Adopted: make([]Volume, len(a.Adopted)), Skipped: adoptionClaims(a.Skipped), Warnings: adoptionClaims(a.Warnings),
		RecordedCount: a.Recorded}
	for i, v := range a.Adopted {
		out.Adopted[i] = toVolume(v)
	}
	out.DcmInstancesWithoutClaim, out.DcmCheck = h.dcmInstancesWithoutClaim(ctx, req.EnvironmentId)
	return AdoptVolumes200JSONResponse(out), nil
}

// adoptionClaims are the contract's form of claims an adoption names.
func adoptionClaims(claims []volumes.Skip) []AdoptionClaim {
	out := make([]AdoptionClaim, len(claims))
	for i, c := range claims {
		out[i] = AdoptionClaim{Namespace: c.Namespace, Name: c.Name, Reason: c.Reason}
	}
	return out
}

// dcmInstancesWithoutClaim are DCM's instances of the environment's
// provider name that it would neither serve nor be able to adopt once the
// adoption just answered is done (a dry run's adoptions count as done):
// what taking the name over would orphan. When DCM cannot be asked, the second value
// says why; without DCM registration there is neither.
func (h *handlers) dcmInstancesWithoutClaim(ctx context.Context, envID string) (*[]DCMInstance, *string) {
	if h.opts.DCM == nil {
		return nil, nil
	}
	env, err := h.opts.Environments.Get(ctx, envID)
	if err != nil {
		return nil, optional("the environment could not be read: " + err.Error())
	}
	without, err := h.opts.DCM.InstancesWithoutClaim(ctx, env)
	if err != nil {
		return nil, optional("DCM's instances of " + env.Spec.DCM.ProviderName + " could not be listed: " + err.Error())
	}
	out := []DCMInstance{}
	for _, in := range without {
		out = append(out, DCMInstance{Id: in.ID, Name: in.Name, Namespace: optional(in.Namespace)})
	}
	return &out, nil
}
