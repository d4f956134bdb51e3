package kubeconfig

import "regexp"

// FieldError names the offending field and why; it never contains the field's
// value, because values may be secrets and errors are shown to API clients.
//
// Field is a path relative to the kubeconfig document (for example
// "users[0].user.exec") for Parse, or an API field name (for example
// "client_key_data") for Connection.Normalize. An empty Field means the whole
// document.
type FieldError struct {
	Field  string
	Reason string
}

// Error renders "field: reason", or just the reason for the whole document.
func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

func fieldErr(field, reason string) error {
	return &FieldError{Field: field, Reason: reason}
}

// plainKey matches unknown keys short and tame enough to be named in an error.
// Longer or unusual keys are not echoed: a misindented token can end up as a
// mapping key, and keys are input like any other.
var plainKey = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,15}$`)

// join appends a mapping key to a field path, hiding keys that are neither
// part of the kubeconfig vocabulary nor plainly named.
func join(path, key string) string {
	if _, known := vocabulary[key]; !known && !plainKey.MatchString(key) {
		key = "<key>"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}
