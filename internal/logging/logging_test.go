package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/logging"
)

// Format characters reach the log escaped, never raw, and the line still
// decodes to the same text; control characters were already escaped by the
// JSON handler.
func TestTheLogEscapesFormatCharacters(t *testing.T) {
	var out bytes.Buffer
	subject := "alice\u202Eevil\u2066x\u200B\uFEFF\U000E0041\x00\x1b"
	logging.New(&out, slog.LevelInfo).Info("audit", "subject", subject, "plain", "ünïcode ok")
	line := out.String()
	for _, raw := range []string{"\u202E", "\u2066", "\u200B", "\uFEFF", "\U000E0041", "\x00", "\x1b"} {
		if strings.Contains(line, raw) {
			t.Errorf("%U reached the log raw: %s", []rune(raw)[0], line)
		}
	}
	for _, escaped := range []string{`\u202e`, `\u2066`, `\u200b`, `\ufeff`, `\udb40\udc41`} {
		if !strings.Contains(line, escaped) {
			t.Errorf("%s missing from %s", escaped, line)
		}
	}
	var decoded map[string]any
	if err := json.Unmarshal(out.Bytes(), &decoded); err != nil {
		t.Fatalf("not JSON: %v: %s", err, line)
	}
	if decoded["subject"] != subject || decoded["plain"] != "ünïcode ok" {
		t.Errorf("decoded %q, %q", decoded["subject"], decoded["plain"])
	}
}

// Clean turns every unsafe character into a space, replaces invalid UTF-8
// and bounds the length; safe text comes back as it was.
func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"alice":                       "alice",
		"grüße 名前":                    "grüße 名前",
		"a\x00b\u202Ec\u2066d\u00ADe": "a b c d e",
		"a\u2028b\u0085c\xffd":        "a b c\uFFFDd",
		strings.Repeat("x", 70):       strings.Repeat("x", 64) + "…(truncated)",
	} {
		if got := logging.Clean(in, 64); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}
