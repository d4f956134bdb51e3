package cli

import (
	"io"
	"unicode/utf8"

	"github.com/dcm-project/storage-gateway/internal/logging"
)

// terminalWriter is what every command prints through: it drops characters
// a terminal would act on rather than show (escape sequences, C1 controls,
// bidirectional overrides), keeping only newlines and tabs. Much of what the
// CLI prints comes from clusters — StorageClass names, versions, provisioning
// messages — and a hostile cluster must not be able to drive an admin's
// terminal through them.
type terminalWriter struct {
	w io.Writer
	// partial holds the start of a UTF-8 sequence split across writes.
	partial []byte
}

func (t *terminalWriter) Write(p []byte) (int, error) {
	data := append(t.partial, p...)
	t.partial = nil
	out := make([]byte, 0, len(data))
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 && !utf8.FullRune(data) {
			t.partial = append(t.partial, data...)
			break
		}
		valid := r != utf8.RuneError || size > 1
		if r == '\n' || r == '\t' || valid && !logging.Unsafe(r) {
			out = append(out, data[:size]...)
		}
		data = data[size:]
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// cell is a table cell: text from the gateway or a cluster, on one line and
// without tabs (which would shift the columns after it).
func cell(s string) string { return logging.Sanitize(s) }
