// Package fault defines the typed errors that use-case packages return so the
// HTTP layer can map them to problem+json in one place. It must not know about
// HTTP or any transport; it only names what went wrong and which field.
package fault

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Kind classifies an error the way a client should react to it.
type Kind int

// The kinds a use case may report. Anything else is an internal error.
const (
	// InvalidArgument: the request itself is malformed (400).
	InvalidArgument Kind = iota + 1
	// NotFound: the addressed resource does not exist (404).
	NotFound
	// AlreadyExists: the id is taken by a different resource (409).
	AlreadyExists
	// Conflict: the resource's current state forbids the change, e.g. deleting
	// an environment that still has volumes (409, FAILED_PRECONDITION).
	Conflict
	// FailedPrecondition: a well-formed request the target cannot satisfy,
	// e.g. a cluster probe failed (422).
	FailedPrecondition
	// Unavailable: a dependency is unreachable; retrying later may work (503).
	Unavailable
)

// HTTPStatus is the status a request refused with k is answered (or, for
// a request that came another way, audited) with.
func (k Kind) HTTPStatus() int {
	switch k {
	case InvalidArgument:
		return 400
	case NotFound:
		return 404
	case AlreadyExists, Conflict:
		return 409
	case FailedPrecondition:
		return 422
	case Unavailable:
		return 503
	}
	return 500
}

// Error is a classified error. Detail is shown to the client, so it must never
// carry secrets or raw upstream responses; Field names the offending request
// field (dotted JSON path) when there is one; RetryAfter, when set, is how
// long a client should wait before retrying (Retry-After).
type Error struct {
	Kind       Kind
	Field      string
	Detail     string
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Detail
	}
	return e.Detail
}

// New builds an Error of kind k with a formatted detail.
func New(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Detail: fmt.Sprintf(format, args...)}
}

// Invalid reports a bad request field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Kind: InvalidArgument, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// As returns the classified error in err's chain, if any.
func As(err error) (*Error, bool) {
	var fe *Error
	ok := errors.As(err, &fe)
	return fe, ok
}

// Is reports whether err is classified as kind k.
func Is(err error, k Kind) bool {
	fe, ok := As(err)
	return ok && fe.Kind == k
}

// plainName is a client-supplied name (a JSON key) short and plain enough
// to repeat back in an error; anything else — say, a token pasted where a
// key belongs — is not echoed.
var plainName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// UnknownField reports a field the request may not carry, naming it only if
// its name is plain: one rule for every operation.
func UnknownField(name string) *Error {
	if plainName.MatchString(name) {
		return Invalid(name, "is not a known field")
	}
	return Invalid("body", "has an unknown field")
}

// RetryLater is an Unavailable error whose client should retry after the
// given time (Retry-After): a cluster connection that is syncing, an
// environment between owners.
func RetryLater(after time.Duration, format string, args ...any) *Error {
	return &Error{Kind: Unavailable, Detail: fmt.Sprintf(format, args...), RetryAfter: after}
}
