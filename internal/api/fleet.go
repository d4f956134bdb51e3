package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/internal/status"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

func (h *handlers) ListStorageClasses(ctx context.Context, req ListStorageClassesRequestObject) (ListStorageClassesResponseObject, error) {
	p := req.Params
	envs, err := h.environmentFilter(ctx, deref(p.Environment))
	if err != nil {
		return nil, err
	}
	if outOfScope(envs) {
		return fleetResponse{value: StorageClassList{StorageClasses: []FleetStorageClass{}}}, nil
	}
	page, err := h.opts.Fleet.Classes(fleet.Filter{
		Environments: envs,
		Region:       deref(p.Region),
		Provisioner:  deref(p.Provisioner),
		AccessMode:   string(deref(p.AccessMode)),
		VolumeMode:   string(deref(p.VolumeMode)),
		Expandable:   p.Expandable,
		IsDefault:    p.IsDefault,
		Snapshots:    p.Snapshots,
		Tier:         deref(p.Tier),
	}, deref(p.MaxPageSize), deref(p.PageToken))
	if err != nil {
		return nil, err
	}
	return fleetResponse{write: func(w io.Writer) error {
		defer page.Release()
		return page.WriteJSON(w)
	}}, nil
}

func (h *handlers) ListPlacements(ctx context.Context, req ListPlacementsRequestObject) (ListPlacementsResponseObject, error) {
	p := req.Params
	size, err := volumes.ParseCapacity("capacity", p.Capacity)
	if err != nil {
		return nil, err
	}
	scope := principal(ctx).Narrow(nil)
	if outOfScope(scope) {
		return fleetResponse{value: Placement{Candidates: []PlacementCandidate{}}}, nil
	}
	explain := deref(p.Explain)
	placement, err := h.opts.Fleet.Place(fleet.Request{
		CapacityBytes: size.Value(), AccessMode: string(deref(p.AccessMode)), VolumeMode: string(deref(p.VolumeMode)),
		Region: deref(p.Region), Zone: deref(p.Zone), Expandable: deref(p.Expandable), Snapshots: deref(p.Snapshots),
		Explain: explain, Environments: scope,
	})
	if err != nil {
		return nil, err
	}
	return fleetResponse{write: func(w io.Writer) error { return placement.WriteJSON(w, explain) }}, nil
}

func (r fleetResponse) VisitListPlacementsResponse(w http.ResponseWriter) error {
	return r.visit(w)
}

func (h *handlers) ListEnvironmentStorageClasses(ctx context.Context, req ListEnvironmentStorageClassesRequestObject) (ListEnvironmentStorageClassesResponseObject, error) {
	classes, err := h.environmentClasses(ctx, req.EnvironmentId)
	if err != nil {
		return nil, err
	}
	return fleetResponse{value: classes}, nil
}

func (h *handlers) GetEnvironmentStorageClass(ctx context.Context, req GetEnvironmentStorageClassRequestObject) (GetEnvironmentStorageClassResponseObject, error) {
	classes, err := h.environmentClasses(ctx, req.EnvironmentId)
	if err != nil {
		return nil, err
	}
	for _, c := range classes.Classes {
		if c.Name == req.StorageClass {
			return fleetResponse{value: c}, nil
		}
	}
	return nil, fault.New(fault.NotFound, "storage class %s not found in environment %s", req.StorageClass, req.EnvironmentId)
}

// environmentClasses answers from the index; an environment the index does
// not hold yet (registered a moment ago) shows no classes, stale, and one
// that is not registered is not found.
func (h *handlers) environmentClasses(ctx context.Context, id string) (fleet.EnvironmentClasses, error) {
	if classes, ok := h.opts.Fleet.Environment(id); ok {
		return classes, nil
	}
	if err := h.opts.Environments.Exists(ctx, id); err != nil {
		return fleet.EnvironmentClasses{}, err
	}
	return fleet.EnvironmentClasses{EnvironmentID: id, Stale: true, Classes: []fleet.Detail{}}, nil
}

func (h *handlers) ListFleetVolumes(ctx context.Context, req ListFleetVolumesRequestObject) (ListFleetVolumesResponseObject, error) {
	p := req.Params
	envs, err := h.environmentFilter(ctx, deref(p.Environment))
	if err != nil {
		return nil, err
	}
	if outOfScope(envs) {
		return ListFleetVolumes200JSONResponse{Volumes: []Volume{}}, nil
	}
	page, err := h.opts.Volumes.ListAll(ctx, volumes.AllQuery{
		Environments: envs,
		Status:       status.Status(deref(p.Status)),
		StorageClass: deref(p.StorageClass),
		MaxPageSize:  deref(p.MaxPageSize),
		PageToken:    deref(p.PageToken),
	})
	if err != nil {
		return nil, err
	}
	return ListFleetVolumes200JSONResponse(toVolumeList(page)), nil
}

// environmentFilter checks an environment filter of a fleet list: an id
// that is not registered, or not in the caller's scope, is a 404 naming the
// filter, as for the environment's own paths. It returns the filter narrowed
// to the caller's scope (an empty filter: the whole scope).
func (h *handlers) environmentFilter(ctx context.Context, ids []string) ([]string, error) {
	p := principal(ctx)
	for _, id := range ids {
		if !p.InScope(id) {
			return nil, &fault.Error{Kind: fault.NotFound, Field: "environment", Detail: fmt.Sprintf("environment %q not found", id)}
		}
	}
	if len(ids) > 0 {
		if err := h.opts.Environments.Exists(ctx, ids...); err != nil {
			if fe, ok := fault.As(err); ok && fe.Kind == fault.NotFound {
				return nil, &fault.Error{Kind: fault.NotFound, Field: "environment", Detail: fe.Detail}
			}
			return nil, err
		}
	}
	return p.Narrow(ids), nil
}

// outOfScope reports a principal whose scope is empty: the answer is
// empty, never the unfiltered fleet.
func outOfScope(envs []string) bool { return envs != nil && len(envs) == 0 }

// fleetResponse writes fleet answers, whose types carry the contract's JSON
// names themselves: either a value, or a writer that streams pre-encoded
// JSON.
type fleetResponse struct {
	value any
	write func(io.Writer) error
}

func (r fleetResponse) visit(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if r.write != nil {
		return r.write(w)
	}
	return json.NewEncoder(w).Encode(r.value)
}

func (r fleetResponse) VisitListStorageClassesResponse(w http.ResponseWriter) error {
	return r.visit(w)
}

func (r fleetResponse) VisitListEnvironmentStorageClassesResponse(w http.ResponseWriter) error {
	return r.visit(w)
}

func (r fleetResponse) VisitGetEnvironmentStorageClassResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
