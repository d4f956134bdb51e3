//go:build tools

// Package gotestsumtools pins gotestsum, which runs make test's tests and
// then prints how many ran and the slowest of them.
package gotestsumtools

import _ "gotest.tools/gotestsum"
