// Package syncbuf is a bytes.Buffer that many goroutines may write to, for
// tests that collect logs or a process's output. It must never be imported by
// production code.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects writes safely from many goroutines.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
