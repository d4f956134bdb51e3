package kubeconfigtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Bait is an isolation check for code that handles hostile kubeconfigs: Env
// points {{DIR}} at a watched directory holding the files the malicious
// corpus references (and a plugin script that would leave a marker) and
// {{SERVER}} at a live listener. Afterwards FileEvents, PluginRan and
// Connections tell whether anything was opened, run or dialled.
type Bait struct {
	Env      Env
	watcher  *watcher
	listener *listener
}

// NewBait prepares the directory, the watcher and the listener; everything
// is released when the test ends.
func NewBait(t *testing.T) *Bait {
	t.Helper()
	dir := t.TempDir()
	writeBait(t, dir)
	l := listen(t)
	return &Bait{Env: Env{Dir: dir, Addr: l.addr, Token: NewCanary()}, watcher: watchDir(t, dir), listener: l}
}

// FileEvents returns the opens, reads and creations in the bait directory
// since the last call.
func (b *Bait) FileEvents(t *testing.T) []string { return b.watcher.drain(t) }

// PluginRan reports whether the bait plugin script was executed.
func (b *Bait) PluginRan() bool {
	_, err := os.Stat(filepath.Join(b.Env.Dir, "marker"))
	return !errors.Is(err, fs.ErrNotExist)
}

// Connections returns the connections the listener accepted since the last
// call.
func (b *Bait) Connections(t *testing.T) []string { return b.listener.connectionsBeforeBarrier(t) }

// AssertUntouched fails t if a bait file was touched, the plugin ran or the
// listener was dialled.
func (b *Bait) AssertUntouched(t *testing.T) {
	t.Helper()
	if events := b.FileEvents(t); len(events) > 0 {
		t.Errorf("files in the bait directory were touched: %v", events)
	}
	if b.PluginRan() {
		t.Error("the exec plugin ran")
	}
	if got := b.Connections(t); len(got) > 0 {
		t.Errorf("the bait listener was dialled %d times", len(got))
	}
}

// writeBait fills dir with the files the malicious kubeconfigs point at.
func writeBait(t *testing.T, dir string) {
	t.Helper()
	f := Fixtures()
	files := map[string][]byte{
		"ca.crt":     f.CA,
		"client.crt": f.Cert,
		"client.key": f.Key,
		"token":      []byte("file-token"),
		"plugin.sh":  fmt.Appendf(nil, "#!/bin/sh\ntouch '%s'\n", filepath.Join(dir, "marker")),
	}
	for name, data := range files {
		// 0700: the plugin script must be executable for "never run" to mean something.
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o700); err != nil { //nolint:gosec // owner-only test bait
			t.Fatal(err)
		}
	}
}

// watcher reports opens, reads and creations in one directory.
type watcher struct{ fd int }

func watchDir(t *testing.T, dir string) *watcher {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN|unix.IN_ACCESS|unix.IN_CREATE); err != nil {
		t.Fatal(err)
	}
	return &watcher{fd: fd}
}

// drain returns the events queued since the last call as "mask name" strings.
func (w *watcher) drain(t *testing.T) []string {
	t.Helper()
	var events []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return events
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+nameLen]), "\x00")
			events = append(events, fmt.Sprintf("%#x %s", mask, name))
			off += unix.SizeofInotifyEvent + nameLen
		}
	}
}

// listener records the remote address of every connection it accepts.
type listener struct {
	addr    string
	mu      sync.Mutex
	remotes []string
}

func listen(t *testing.T) *listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	l := &listener{addr: ln.Addr().String()}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.remotes = append(l.remotes, conn.RemoteAddr().String())
			l.mu.Unlock()
			_ = conn.Close()
		}
	}()
	return l
}

// connectionsBeforeBarrier dials a barrier connection and, once it is
// accepted, returns the connections accepted before it and forgets them.
// Accepts are in order, so any earlier dial has been counted by then.
func (l *listener) connectionsBeforeBarrier(t *testing.T) []string {
	t.Helper()
	conn, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	barrier := conn.LocalAddr().String()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		i := slices.Index(l.remotes, barrier)
		before := slices.Clone(l.remotes[:max(i, 0)])
		if i >= 0 {
			l.remotes = slices.Delete(l.remotes, 0, i+1)
		}
		l.mu.Unlock()
		if i >= 0 {
			return before
		}
	}
	t.Fatal("the barrier connection was never accepted")
	return nil
}
