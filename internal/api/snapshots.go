package api

import (
	"context"

	"github.com/dcm-project/storage-gateway/internal/snapshots"
)

func (h *handlers) CreateSnapshot(ctx context.Context, req CreateSnapshotRequestObject) (CreateSnapshotResponseObject, error) {
	var in snapshots.Request
	if req.Body != nil {
		in.SnapshotClass = deref(req.Body.SnapshotClass)
	}
	snap, created, err := h.opts.Snapshots.Create(ctx, req.EnvironmentId, req.VolumeId, deref(req.Params.Id), deref(req.Params.IdempotencyKey), in)
	if err != nil {
		return nil, err
	}
	if created {
		return CreateSnapshot201JSONResponse(toSnapshot(snap)), nil
	}
	return CreateSnapshot200JSONResponse(toSnapshot(snap)), nil
}

func (h *handlers) ListSnapshots(ctx context.Context, req ListSnapshotsRequestObject) (ListSnapshotsResponseObject, error) {
	page, err := h.opts.Snapshots.List(ctx, req.EnvironmentId, req.VolumeId, deref(req.Params.MaxPageSize), deref(req.Params.PageToken))
	if err != nil {
		return nil, err
	}
	out := SnapshotList{Snapshots: make([]Snapshot, 0, len(page.Snapshots)), NextPageToken: optional(page.NextPageToken)}
	for _, snap := range page.Snapshots {
		out.Snapshots = append(out.Snapshots, toSnapshot(snap))
	}
	return ListSnapshots200JSONResponse(out), nil
}

func (h *handlers) GetSnapshot(ctx context.Context, req GetSnapshotRequestObject) (GetSnapshotResponseObject, error) {
	snap, err := h.opts.Snapshots.Get(ctx, req.EnvironmentId, req.VolumeId, req.SnapshotId)
	if err != nil {
		return nil, err
	}
	return GetSnapshot200JSONResponse(toSnapshot(snap)), nil
}

func (h *handlers) DeleteSnapshot(ctx context.Context, req DeleteSnapshotRequestObject) (DeleteSnapshotResponseObject, error) {
	if err := h.opts.Snapshots.Delete(ctx, req.EnvironmentId, req.VolumeId, req.SnapshotId); err != nil {
		return nil, err
	}
	return DeleteSnapshot204Response{}, nil
}

func toSnapshot(s snapshots.Snapshot) Snapshot {
	return Snapshot{
		Id:            s.ID,
		Path:          "environments/" + s.EnvironmentID + "/volumes/" + s.VolumeID + "/snapshots/" + s.ID,
		EnvironmentId: s.EnvironmentID,
		VolumeId:      s.VolumeID,
		Namespace:     s.Namespace,
		SnapshotClass: optional(s.SnapshotClass),
		Status:        SnapshotStatus(s.Status),
		StatusMessage: s.Message,
		RestoreSize:   optional(s.RestoreSize),
		CreateTime:    s.CreateTime,
		UpdateTime:    s.UpdateTime,
	}
}
