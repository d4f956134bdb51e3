package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFile, in make run's state directory, is locked for as long as a run
// lives. The recipe's shell opens it (fd 9) and `local-clusters -preflight`
// locks that open file: the lock then belongs to the shell's descriptor,
// which every process of the run inherits, so it holds until the last of
// them is gone — however the run ends — and nothing is written before it
// is taken.
const LockFile = "make-run.lock"

// preflight checks, before make run touches anything, that no other run
// uses the state directory (the lock on fd) and that the addresses the run
// will listen on are free; the refusal says how to run another instance.
func preflight(fd int, state string, addresses []string) error {
	f := os.NewFile(uintptr(fd), filepath.Join(state, LockFile))
	if f == nil {
		return fmt.Errorf("-lock-fd %d is not open", fd)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		holder, _ := os.ReadFile(f.Name())
		return fmt.Errorf("another make run uses %s (%s); stop it first (Ctrl-C in its terminal), or %s",
			state, strings.TrimSpace(string(holder)), anotherInstance)
	}
	// Who holds it, for the next one's refusal: the recipe's shell, which
	// becomes local-clusters (exec).
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte("make run, pid "+strconv.Itoa(os.Getppid())+"\n"), 0)
	}
	for _, addr := range addresses {
		if addr == "" || addr == "off" {
			continue
		}
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		if err != nil {
			return fmt.Errorf("%s is in use (another gateway?): %s", addr, anotherInstance)
		}
		_ = l.Close()
	}
	return nil
}

// anotherInstance says how to run a second make run beside the first.
const anotherInstance = "run another instance beside it with its own state directory, ports and databases: " +
	"make run INSTANCE=2 (or set SG_STATE_DIR, SG_LISTEN_ADDR, SG_DATABASE_URL and SG_EMBEDDED_NATS_LISTEN yourself)"
