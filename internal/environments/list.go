package environments

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"slices"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
)

// Page sizes of AEP-158.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

var states = []clusters.State{clusters.StatePending, clusters.StateReady, clusters.StateDegraded, clusters.StateUnreachable, clusters.StateUnauthorized}

// pageToken is the decoded form of an opaque page token: where the previous
// page ended, and a fingerprint of the filters it was issued for, so a token
// cannot be replayed against a different query.
type pageToken struct {
	After  string `json:"a"`
	Filter string `json:"f"`
}

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
		page.NextPageToken = encodeToken(pageToken{After: recs[len(recs)-1].ID, Filter: q.fingerprint()})
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
	f := listFilter{region: q.Region, state: string(q.State), limit: q.MaxPageSize + 1}
	switch {
	case q.MaxPageSize < 0:
		return f, fault.Invalid("max_page_size", "must not be negative")
	case q.MaxPageSize == 0:
		f.limit = DefaultPageSize + 1
	case q.MaxPageSize > MaxPageSize:
		f.limit = MaxPageSize + 1
	}
	if q.State != "" && !slices.Contains(states, q.State) {
		return f, fault.Invalid("state", "must be one of PENDING, READY, DEGRADED, UNREACHABLE, UNAUTHORIZED")
	}
	if len(q.Labels) > 0 {
		f.labels = mustJSON(q.Labels)
	}
	if q.PageToken != "" {
		tok, ok := decodeToken(q.PageToken)
		if !ok || tok.Filter != q.fingerprint() {
			return f, fault.Invalid("page_token", "is not a token issued for this query")
		}
		f.after = tok.After
	}
	return f, nil
}

// fingerprint identifies the filters (not the page size, which may change
// between pages).
func (q ListQuery) fingerprint() string {
	sum := sha256.Sum256(mustJSON([]any{q.Labels, q.Region, q.State}))
	return base64.RawURLEncoding.EncodeToString(sum[:8])
}

func encodeToken(t pageToken) string {
	return base64.RawURLEncoding.EncodeToString(mustJSON(t))
}

func decodeToken(s string) (pageToken, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return pageToken{}, false
	}
	var t pageToken
	if json.Unmarshal(raw, &t) != nil || t.After == "" {
		return pageToken{}, false
	}
	return t, true
}
