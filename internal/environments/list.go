package environments

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/paging"
)

var states = []State{StatePending, StateReady, StateDegraded, StateUnreachable, StateUnauthorized}

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
	if f.labels, err = labelTerms(q.LabelSelector); err != nil {
		return f, err
	}
	f.after, err = paging.After(q.PageToken, q.filterKey())
	return f, err
}

// labelTerms parses a label selector as kubectl writes one — `tier=prod`,
// `tier!=dev`, `tier in (a,b)`, `tier notin (a)`, `tier` (exists),
// `!tier` (absent) — with Kubernetes' own parser.
func labelTerms(selector string) ([]labelTerm, error) {
	reqs, err := labels.ParseToRequirements(selector)
	if err != nil {
		return nil, fault.Invalid("label_selector", "is not a label selector (key=value, key!=value, key in (a,b), key notin (a,b), key, !key): %s", firstLine(err.Error()))
	}
	terms := make([]labelTerm, 0, len(reqs))
	for _, r := range reqs {
		t := labelTerm{key: r.Key()}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			t.values = r.ValuesUnsorted()
		case selection.NotEquals, selection.NotIn:
			t.values, t.negate = r.ValuesUnsorted(), true
		case selection.Exists:
		case selection.DoesNotExist:
			t.negate = true
		default:
			return nil, fault.Invalid("label_selector", "supports =, ==, !=, in, notin, key and !key (not %s)", r.Operator())
		}
		terms = append(terms, t)
	}
	return terms, nil
}

// firstLine is the first line of s.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// filterKey identifies the filters (not the page size, which may change
// between pages) in page tokens.
func (q ListQuery) filterKey() any {
	return []any{q.LabelSelector, q.Region, q.State, q.Environments}
}
