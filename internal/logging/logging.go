// Package logging owns the gateway's log format: one JSON object per line on
// one writer, carrying the id of the request a line belongs to, with the
// Kubernetes client libraries' own logging (klog) routed into the same
// handler and the text a cluster controls made safe. It must not decide
// what is logged; callers do, and never log credentials.
package logging

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// New returns the gateway's logger: JSON on w at level, with the request id
// of each line's context, and format characters escaped.
func New(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(contextHandler{slog.NewJSONHandler(formatEscaper{w}, &slog.HandlerOptions{Level: level})})
}

// formatEscaper writes the JSON handler's lines with every Unicode format
// character (bidirectional overrides and isolates, zero-width characters,
// byte order marks) as a \u escape. The handler escapes control
// characters but writes these raw, and a terminal or log viewer showing a
// line would then reorder or hide what it says. They occur only inside
// JSON strings (everything else the handler writes is ASCII), where the
// escape is the same text.
type formatEscaper struct{ w io.Writer }

func (e formatEscaper) Write(p []byte) (int, error) {
	if !hasFormat(p) {
		return e.w.Write(p)
	}
	n := len(p)
	out := make([]byte, 0, n+32)
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		if unicode.Is(unicode.Cf, r) {
			for _, unit := range utf16.Encode([]rune{r}) {
				out = fmt.Appendf(out, `\u%04x`, unit)
			}
		} else {
			out = append(out, p[:size]...)
		}
		p = p[size:]
	}
	if _, err := e.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// hasFormat reports whether p holds a format character (none in ASCII).
func hasFormat(p []byte) bool {
	for i := 0; i < len(p); {
		if p[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if unicode.Is(unicode.Cf, r) {
			return true
		}
		i += size
	}
	return false
}

type requestIDKey struct{}

// WithRequestID returns ctx carrying a request id for every line logged with it.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// contextHandler adds the context's request id to a line that has none.
type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		has := false
		r.Attrs(func(a slog.Attr) bool {
			has = a.Key == "request_id"
			return !has
		})
		if !has {
			r.AddAttrs(slog.String("request_id", id))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(attrs)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}

// RouteKlog sends everything klog writes (client-go's reflectors, watch
// errors, request retries) through logger, once per process and before any
// cluster is contacted. Without it klog writes its own text lines to
// stderr, between the JSON ones, with an API server's error message
// verbatim: a hostile cluster could forge lines of the gateway's log. Routed,
// each becomes one JSON line whose text values are sanitized and bounded.
// Verbosity is pinned at 0 and only info and above pass: at higher levels
// client-go logs request headers, bearer tokens included.
func RouteKlog(logger *slog.Logger) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", "0")      // a registered flag with a valid value
	_ = fs.Set("vmodule", "") // no per-file verbosity either
	klog.SetLoggerWithOptions(logr.FromSlogHandler(klogHandler{logger.Handler().WithAttrs(
		[]slog.Attr{slog.String("source", "kubernetes-client")})}), klog.ContextualLogger(true))
}

// klogHandler passes only info and above and sanitizes every text value.
type klogHandler struct{ next slog.Handler }

func (h klogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo && h.next.Enabled(ctx, level)
}

func (h klogHandler) Handle(ctx context.Context, r slog.Record) error {
	clean := slog.NewRecord(r.Time, r.Level, Sanitize(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		clean.AddAttrs(sanitizeAttr(a))
		return true
	})
	return h.next.Handle(ctx, clean)
}

func (h klogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = sanitizeAttr(a)
	}
	return klogHandler{h.next.WithAttrs(clean)}
}

func (h klogHandler) WithGroup(name string) slog.Handler {
	return klogHandler{h.next.WithGroup(Sanitize(name))}
}

// sanitizeAttr keeps numbers, booleans and times, and renders everything
// else (strings, errors, objects) as sanitized text.
func sanitizeAttr(a slog.Attr) slog.Attr {
	key := Sanitize(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindBool, slog.KindInt64, slog.KindUint64, slog.KindFloat64, slog.KindDuration, slog.KindTime:
		return slog.Attr{Key: key, Value: v}
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = sanitizeAttr(g)
		}
		return slog.Group(key, clean...)
	case slog.KindString:
		return slog.String(key, Sanitize(v.String()))
	}
	return slog.String(key, Sanitize(fmt.Sprint(v.Any())))
}

// maxTextLength bounds one sanitized text value, in bytes.
const maxTextLength = 1024

// Sanitize makes text the gateway does not control safe to log or print:
// unsafe characters become spaces, invalid UTF-8 is replaced, and text
// longer than 1 KiB is cut.
func Sanitize(s string) string { return Clean(s, maxTextLength) }

// Clean is Sanitize with a bound of max bytes.
func Clean(s string, max int) string {
	clean := true
	for _, r := range s {
		clean = clean && r != utf8.RuneError && !Unsafe(r)
	}
	if clean && len(s) <= max {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), max+16))
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if b.Len()+utf8.RuneLen(r) > max {
			b.WriteString("…(truncated)")
			break
		}
		if Unsafe(r) {
			r = ' '
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Unsafe reports characters a terminal may act on or hide rather than
// show: control characters (C0 and C1; escape sequences start with one),
// line and paragraph separators, and format characters — bidirectional
// overrides and isolates that reorder what is displayed, zero-width ones
// that hide a difference.
func Unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}
