// Package ports finds free loopback TCP ports for tests that must tell a
// process its address in advance. It must never be imported by production code.
package ports

import (
	"net"
	"testing"
)

// Free returns a loopback port that was free a moment ago.
func Free(t testing.TB) int {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}
