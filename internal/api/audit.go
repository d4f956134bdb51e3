package api

import (
	"context"
	"strconv"

	"github.com/dcm-project/storage-gateway/internal/auth"
)

func (h *handlers) ListAuditEvents(ctx context.Context, req ListAuditEventsRequestObject) (ListAuditEventsResponseObject, error) {
	p := req.Params
	var envs []string
	if p.Environment != nil {
		envs = []string{*p.Environment}
	}
	page, err := h.opts.Audit.List(ctx, auth.AuditQuery{
		Subject:      deref(p.Subject),
		Action:       deref(p.Action),
		Environments: principal(ctx).Narrow(envs),
		Since:        p.StartTime,
		Until:        p.EndTime,
		MaxPageSize:  deref(p.MaxPageSize),
		PageToken:    deref(p.PageToken),
	})
	if err != nil {
		return nil, err
	}
	out := ListAuditEvents200JSONResponse{AuditEvents: make([]AuditEvent, len(page.Events)), NextPageToken: optional(page.NextPageToken)}
	for i, e := range page.Events {
		roles := make([]Role, len(e.Roles))
		for j, r := range e.Roles {
			roles[j] = Role(r)
		}
		out.AuditEvents[i] = AuditEvent{
			Id: strconv.FormatInt(e.ID, 10), Time: e.Time, RequestId: e.RequestID, Subject: e.Subject, Name: e.Name,
			Roles: roles, AuthMethod: AuditEventAuthMethod(e.AuthMethod), Action: e.Action,
			EnvironmentId: optional(e.EnvironmentID), VolumeId: optional(e.VolumeID), Status: e.Status, Peer: e.Peer,
		}
	}
	return out, nil
}
