package environments

import (
	"context"
	"slices"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/paging"
)

var states = []clusters.State{clusters.StatePending, clusters.StateReady, clusters.StateDegraded, clusters.StateUnreachable, clusters.StateUnauthorized}

// List returns one page of environments matching the query, ordered by id.
func (s *Service) List(ctx context.Context, q ListQuery) (Page, error) {
	f, err := q.filter()
	if err != nil {
		return Page{}, err
	}
	recs, err := s.repo.list(ctx, f)
	if err != nil {
		return Page{}, err
	}
	var page Page
	if len(recs) == f.limit {
		recs = recs[:f.limit-1]
		page.NextPageToken = paging.Token(recs[len(recs)-1].ID, q.filterKey())
	}
	for _, r := range recs {
		page.Environments = append(page.Environments, r.Environment)
	}
	return page, nil
}

// Each calls fn for every environment in id order, stopping at its first
// error.
func (s *Service) Each(ctx context.Context, fn func(Environment) error) error {
	return s.repo.each(ctx, func(rec record) error { return fn(rec.Environment) })
}

// filter validates the query and turns it into SQL terms. It asks the
// repository for one row more than the page size to learn whether another
// page follows.
func (q ListQuery) filter() (listFilter, error) {
	size, err := paging.Size(q.MaxPageSize)
	if err != nil {
		return listFilter{}, err
	}
	f := listFilter{ids: q.Environments, region: q.Region, state: string(q.State), limit: size + 1}
	if q.State != "" && !slices.Contains(states, q.State) {
		return f, fault.Invalid("state", "must be one of PENDING, READY, DEGRADED, UNREACHABLE, UNAUTHORIZED")
	}
	if len(q.Labels) > 0 {
		f.labels = mustJSON(q.Labels)
	}
	f.after, err = paging.After(q.PageToken, q.filterKey())
	return f, err
}

// filterKey identifies the filters (not the page size, which may change
// between pages) in page tokens.
func (q ListQuery) filterKey() any { return []any{q.Labels, q.Region, q.State, q.Environments} }
