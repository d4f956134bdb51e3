package volumes

import (
	"context"
	"slices"
	"strings"

	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/paging"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// AllQuery filters the fleet-wide volume list; zero fields match
// everything except DELETED volumes, which are listed only when Status asks
// for them.
type AllQuery struct {
	Environments []string      `json:"e,omitempty"`
	Status       status.Status `json:"s,omitempty"`
	StorageClass string        `json:"c,omitempty"`
	MaxPageSize  int           `json:"-"`
	PageToken    string        `json:"-"`
}

var statuses = []status.Status{status.Provisioning, status.Running, status.Failed, status.Deleting, status.Deleted}

// ListAll returns volumes of every environment from the records alone (the
// status and bound volume last recorded): it never reads a cluster, so an
// unreachable one cannot slow or fail it, and every replica answers the
// same. Order is by environment, then id.
func (s *Service) ListAll(ctx context.Context, q AllQuery) (Page, error) {
	if q.Status != "" && !slices.Contains(statuses, q.Status) {
		return Page{}, fault.Invalid("status", "must be one of PROVISIONING, RUNNING, FAILED, DELETING, DELETED")
	}
	size, err := paging.Size(q.MaxPageSize)
	if err != nil {
		return Page{}, err
	}
	cursor, err := paging.After(q.PageToken, q)
	if err != nil {
		return Page{}, err
	}
	afterEnv, afterID, _ := strings.Cut(cursor, "/")
	recs, err := s.repo.listAll(ctx, q, afterEnv, afterID, size+1)
	if err != nil {
		return Page{}, err
	}
	var page Page
	recs, page.NextPageToken = paging.Cut(recs, size, func(r record) string { return r.EnvironmentID + "/" + r.ID }, q)
	for _, rec := range recs {
		// Records only, the bound volume's name included: every replica
		// answers the same, whichever owns the environment.
		page.Volumes = append(page.Volumes, fromRecord(rec))
	}
	return page, nil
}
