package secrets

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ReadPrivateFile reads a file that holds secrets (a key ring, a token
// file), at most maxSize bytes. It refuses a file that group or others can
// access, since anyone who can read it holds what it protects — with one
// exception: a file root owns and lets only the (non-root) process's group
// read, which is how the kubelet mounts a Secret for a pod with fsGroup
// (mode 0440, group fsGroup): a non-root process can read a mounted Secret
// no other way, and only root could have shared it so.
func ReadPrivateFile(path string, maxSize int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 && (perm&0o077 != 0o040 || !sharedWithOurGroup(info)) {
		return nil, fmt.Errorf("%s is accessible by group or others (mode %#o); restrict it with: chmod 600 %s", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(maxSize)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSize {
		clear(data)
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSize)
	}
	return data, nil
}

// WritePrivateFile replaces path with data, mode 0600, through a synced temporary file in
// the same directory (rename is only atomic within one file system), then
// syncs the directory so the rename itself survives a crash.
func WritePrivateFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if err := writeAndClose(tmp, data); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return syncDir(dir)
}

func writeAndClose(f *os.File, data []byte) error {
	return errors.Join(writeAndSync(f, data), f.Close())
}

// writeAndSync sets the mode explicitly rather than trusting CreateTemp's
// default, since the mode is the file's only protection.
func writeAndSync(f *os.File, data []byte) error {
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
