package kubeconfig_test

import (
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

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// TestParseNeverTouchesFilesProcessesOrNetwork runs Parse over every testdata
// file while {{DIR}} holds real files and a plugin script and {{SERVER}} is a
// live listener, then proves nothing was opened, run or dialled.
func TestParseNeverTouchesFilesProcessesOrNetwork(t *testing.T) {
	dir := t.TempDir()
	writeBait(t, dir)
	w := watchDir(t, dir)
	l := listen(t)
	e := env{dir: dir, addr: l.addr, token: newCanary()}

	t.Run("sanity: the watcher sees a file being read", func(t *testing.T) {
		if _, err := os.ReadFile(filepath.Join(dir, "ca.crt")); err != nil {
			t.Fatal(err)
		}
		if events := w.drain(t); len(events) == 0 {
			t.Fatal("reading a watched file produced no inotify event")
		}
	})
	t.Run("sanity: the listener sees a connection", func(t *testing.T) {
		conn, err := net.Dial("tcp", l.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()
		if got := l.connectionsBeforeBarrier(t); len(got) != 1 {
			t.Fatalf("listener saw %d connections, want 1", len(got))
		}
	})

	for _, f := range readTestFiles(t, "malicious") {
		for _, allow := range []bool{false, true} {
			_, _ = kubeconfig.Parse(e.expand(f.template), kubeconfig.Options{AllowInsecure: allow})
		}
	}
	for _, f := range readTestFiles(t, "valid") {
		if _, err := kubeconfig.Parse(e.expand(f.template), kubeconfig.Options{AllowInsecure: true}); err != nil {
			t.Errorf("valid file %s: %v", f.name, err)
		}
	}

	if events := w.drain(t); len(events) > 0 {
		t.Errorf("Parse touched files in {{DIR}}: %v", events)
	}
	if _, err := os.Stat(filepath.Join(dir, "marker")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the plugin script ran (marker stat: %v)", err)
	}
	if got := l.connectionsBeforeBarrier(t); len(got) > 0 {
		t.Errorf("Parse dialled {{SERVER}} %d times", len(got))
	}
}

// writeBait fills dir with the files the malicious kubeconfigs point at.
func writeBait(t *testing.T, dir string) {
	t.Helper()
	f := pki()
	files := map[string][]byte{
		"ca.crt":     f.ca,
		"client.crt": f.cert,
		"client.key": f.key,
		"token":      []byte("file-token"),
		"plugin.sh":  fmt.Appendf(nil, "#!/bin/sh\ntouch '%s'\n", filepath.Join(dir, "marker")),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o700); err != nil {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
	conn, err := net.Dial("tcp", l.addr)
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
