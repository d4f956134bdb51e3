package cli

import (
	"bytes"
	"testing"
)

// What the CLI prints passes through terminalWriter: control characters a
// terminal would act on are dropped, text is kept, even when a character
// arrives split across writes.
func TestTerminalWriterDropsWhatATerminalWouldAct(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain\ttext\n", "plain\ttext\n"},
		{"red \x1b[31mtext\x1b[0m", "red [31mtext[0m"},
		{"title \x1b]0;pwned\x07!", "title ]0;pwned!"},
		{"c1 \u009b31m csi", "c1 31m csi"},
		{"bidi \u202egnp.exe", "bidi gnp.exe"},
		{"line\u2028sep\r\n", "linesep\n"},
		{"naïve 日本 ✓ \uFFFD", "naïve 日本 ✓ \uFFFD"},
		{"bad \xff byte", "bad  byte"},
	} {
		var out bytes.Buffer
		w := &terminalWriter{w: &out}
		if n, err := w.Write([]byte(tc.in)); err != nil || n != len(tc.in) {
			t.Fatalf("Write(%q) = %d, %v", tc.in, n, err)
		}
		if out.String() != tc.want {
			t.Errorf("%q printed as %q, want %q", tc.in, out.String(), tc.want)
		}
	}
	var out bytes.Buffer
	w := &terminalWriter{w: &out}
	whole := []byte("日本\x1b")
	for _, b := range whole {
		_, _ = w.Write([]byte{b}) // one byte at a time
	}
	if out.String() != "日本" {
		t.Fatalf("split runes printed as %q", out.String())
	}
}
