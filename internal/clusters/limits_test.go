package clusters

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// A bounded body reads up to its limit; one byte more is an error, and the
// underlying reader's own end or error passes through at the limit.
func TestBoundedBody(t *testing.T) {
	for _, tc := range []struct {
		body string
		max  int64
		want error
	}{
		{"12345", 5, nil},
		{"123456", 5, ErrResponseTooLarge},
		{"", 0, nil},
		{"1", 0, ErrResponseTooLarge},
	} {
		b := &boundedBody{ReadCloser: io.NopCloser(strings.NewReader(tc.body)), left: tc.max}
		got, err := io.ReadAll(b)
		if !errors.Is(err, tc.want) || (tc.want == nil && string(got) != tc.body) {
			t.Errorf("%q with a limit of %d: %q, %v; want %v", tc.body, tc.max, got, err, tc.want)
		}
	}
	broken := errors.New("connection reset")
	b := &boundedBody{ReadCloser: io.NopCloser(io.MultiReader(strings.NewReader("abc"), errReader{broken})), left: 3}
	if _, err := io.ReadAll(b); !errors.Is(err, broken) {
		t.Fatalf("an error right at the limit became %v", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
