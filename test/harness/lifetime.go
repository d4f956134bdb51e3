package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The control-plane processes must not outlive the process that runs the
// harness, however it ends: a test binary killed at its timeout, `make run`
// closed with its terminal. envtest starts etcd and kube-apiserver in their
// own process groups (so a terminal's signals miss them) and offers no way to
// set a parent-death signal. So the harness starts them through itself: each
// cluster's bin directory links etcd and kube-apiserver to this executable,
// which, started under one of those names with launcherDirEnv set, asks the
// kernel for SIGKILL when its parent dies and then executes the real binary
// (the parent-death signal survives exec).
const (
	// launcherDirEnv names the directory of the real binaries.
	launcherDirEnv = "SG_HARNESS_LAUNCH_FROM"
	// launcherParentEnv is the harness process's pid: a launcher whose
	// parent died before it set the signal must not run on as an orphan.
	launcherParentEnv = "SG_HARNESS_LAUNCHER_PARENT"
)

// launchedBinaries are the control-plane programs envtest starts.
var launchedBinaries = []string{"etcd", "kube-apiserver"}

func init() {
	dir := os.Getenv(launcherDirEnv)
	name := filepath.Base(os.Args[0])
	if dir == "" || !slices.Contains(launchedBinaries, name) {
		return
	}
	if err := launch(dir, name); err != nil {
		fmt.Fprintf(os.Stderr, "harness launcher for %s: %v\n", name, err)
		os.Exit(1)
	}
}

// launch becomes the real binary name from dir, set to die with its parent.
func launch(dir, name string) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("set the parent-death signal: %w", err)
	}
	if parent := os.Getenv(launcherParentEnv); parent != strconv.Itoa(os.Getppid()) {
		return errors.New("the harness process is gone")
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, launcherDirEnv+"=") || strings.HasPrefix(kv, launcherParentEnv+"=")
	})
	return syscall.Exec(filepath.Join(dir, name), os.Args, env)
}

// linkLaunchers makes binDir hold etcd and kube-apiserver as links to this
// executable and points launched processes at the real ones in realDir. The
// environment is the process's own, which envtest's children inherit.
func linkLaunchers(binDir, realDir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.Setenv(launcherDirEnv, realDir); err != nil {
		return err
	}
	if err := os.Setenv(launcherParentEnv, strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	if err := os.MkdirAll(binDir, 0o700); err != nil {
		return err
	}
	for _, name := range launchedBinaries {
		if err := os.Symlink(self, filepath.Join(binDir, name)); err != nil {
			return err
		}
	}
	return nil
}

// workDirPattern names the harness's directories under the temp directory.
const workDirPattern = "sg-harness-"

// ownerFile, in a work directory, is held locked by the process that uses
// the directory for as long as it lives: the kernel drops the lock when it
// dies, however it dies.
const ownerFile = "owner.lock"

// newWorkDir creates a work directory for cluster id, locked by this
// process, after removing the directories of harness processes that died
// without cleaning up (killed outright). The returned file holds the lock;
// closing it gives the directory up.
func newWorkDir(id string) (string, *os.File, error) {
	removeAbandonedWorkDirs()
	dir, err := os.MkdirTemp("", workDirPattern+id+"-")
	if err != nil {
		return "", nil, err
	}
	// Locked under another name and then renamed, so that no sweeper ever
	// finds the lock file unlocked.
	pending := filepath.Join(dir, ownerFile+".new")
	lock, err := os.OpenFile(pending, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err == nil {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(pending, filepath.Join(dir, ownerFile))
	}
	if err != nil {
		if lock != nil {
			_ = lock.Close()
		}
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("lock work directory: %w", err)
	}
	return dir, lock, nil
}

// removeAbandonedWorkDirs removes harness work directories whose owner lock
// nobody holds. Directories without a lock file are left alone: they may
// belong to a harness that is creating one right now.
func removeAbandonedWorkDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), workDirPattern+"*"))
	for _, dir := range dirs {
		lock, err := os.OpenFile(filepath.Join(dir, ownerFile), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = os.RemoveAll(dir)
		}
		_ = lock.Close()
	}
}

// ProcessesWithEnv lists the live processes (pid and command line) whose
// environment holds kv, such as TMPDIR=<a test's directory>: every process
// a harness user starts inherits it, so tests find what was left behind.
func ProcessesWithEnv(kv string) []string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(environ), "\x00"), kv) {
			continue
		}
		// Zombies are gone but for their parent's wait: the state field
		// follows the command in parentheses.
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		found = append(found, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return found
}

// WaitForNoProcessesWithEnv fails t when processes with kv in their
// environment are still alive after timeout (killed ones may take a moment
// to go).
func WaitForNoProcessesWithEnv(t testing.TB, kv string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for left := ProcessesWithEnv(kv); len(left) > 0; left = ProcessesWithEnv(kv) {
		if time.Now().After(deadline) {
			t.Fatalf("processes with %s left behind:\n%s", kv, strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
