package paging_test

import (
	"errors"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/paging"
)

func TestSize(t *testing.T) {
	for requested, want := range map[int]int{0: paging.DefaultSize, 1: 1, 1000: 1000, 5000: paging.MaxSize} {
		if got, err := paging.Size(requested); err != nil || got != want {
			t.Errorf("Size(%d) = %d, %v; want %d", requested, got, err, want)
		}
	}
	if _, err := paging.Size(-1); !namesField(err, "max_page_size") {
		t.Errorf("Size(-1) = %v, want an error naming max_page_size", err)
	}
}

func TestTokensAreBoundToTheirQuery(t *testing.T) {
	type filter struct{ Region string }
	token := paging.Token("env-7/vol-1", filter{"east"})
	if after, err := paging.After(token, filter{"east"}); err != nil || after != "env-7/vol-1" {
		t.Fatalf("After = %q, %v", after, err)
	}
	if after, err := paging.After("", filter{"east"}); err != nil || after != "" {
		t.Fatalf("the first page: %q, %v", after, err)
	}
	for name, bad := range map[string]string{
		"other filters": token,
		"not base64":    "%%%",
		"not a token":   "eyJ4IjoxfQ", // {"x":1}
	} {
		if _, err := paging.After(bad, filter{"west"}); !namesField(err, "page_token") {
			t.Errorf("%s: %v, want an error naming page_token", name, err)
		}
	}
}

func namesField(err error, field string) bool {
	var fe *fault.Error
	return errors.As(err, &fe) && fe.Kind == fault.InvalidArgument && fe.Field == field
}

func TestCutEndsAPageFetchedOnePastItsSize(t *testing.T) {
	id := func(s string) string { return s }
	if page, next := paging.Cut([]string{"a", "b"}, 2, id, "f"); len(page) != 2 || next != "" {
		t.Fatalf("a last page: %v, token %q", page, next)
	}
	page, next := paging.Cut([]string{"a", "b", "c"}, 2, id, "f")
	if len(page) != 2 || page[1] != "b" {
		t.Fatalf("a page with more after it: %v", page)
	}
	if after, err := paging.After(next, "f"); err != nil || after != "b" {
		t.Fatalf("the next page starts after %q (%v), want b", after, err)
	}
}
