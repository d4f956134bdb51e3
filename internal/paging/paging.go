// Package paging owns the AEP-158 list conventions every list endpoint
// shares: page sizes, and opaque page tokens that carry where the previous
// page ended and a fingerprint of the filters it was issued for, so a token
// cannot be replayed against a different query.
package paging

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"

	"github.com/dcm-project/storage-gateway/internal/fault"
)

// Page sizes of AEP-158.
const (
	DefaultSize = 50
	MaxSize     = 1000
)

// Size validates a requested max_page_size: 0 means the default, and larger
// values than MaxSize are lowered to it.
func Size(requested int) (int, error) {
	switch {
	case requested < 0:
		return 0, fault.Invalid("max_page_size", "must not be negative")
	case requested == 0:
		return DefaultSize, nil
	}
	return min(requested, MaxSize), nil
}

type token struct {
	After  string `json:"a"`
	Filter string `json:"f"`
}

// Token is the page token for a page that ended at after (a cursor the list
// defines), issued for the query described by filter (any JSON-encodable
// value; the page size does not belong in it).
func Token(after string, filter any) string {
	raw, _ := json.Marshal(token{After: after, Filter: fingerprint(filter)}) // two strings always encode
	return base64.RawURLEncoding.EncodeToString(raw)
}

// After decodes a page token issued for filter and returns its cursor; an
// empty token is the first page (""). Any other token is refused, naming
// page_token.
func After(pageToken string, filter any) (string, error) {
	if pageToken == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(pageToken)
	var t token
	if err != nil || json.Unmarshal(raw, &t) != nil || t.After == "" || t.Filter != fingerprint(filter) {
		return "", fault.Invalid("page_token", "is not a token issued for this query")
	}
	return t.After, nil
}

func fingerprint(filter any) string {
	raw, err := json.Marshal(filter)
	if err != nil {
		panic("paging: filter does not encode: " + err.Error())
	}
	sum := sha256.Sum256(raw)
	return base64.RawURLEncoding.EncodeToString(sum[:8])
}

// Cut ends a page of items fetched one past size (size+1 asked for, so a
// next page is known to exist without counting): it returns at most size
// items and, when there were more, the token of the next page — issued for
// filter, after the cursor of the page's last item.
func Cut[T any](items []T, size int, cursor func(T) string, filter any) (page []T, nextPageToken string) {
	if len(items) <= size {
		return items, ""
	}
	return items[:size], Token(cursor(items[size-1]), filter)
}
