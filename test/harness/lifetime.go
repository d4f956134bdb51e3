package harness

import (
	"fmt"
	"os"
	"os/exec"
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
// closed with its terminal. On Linux a parent-death signal does it; envtest
// starts etcd and kube-apiserver in their own process groups (so a
// terminal's signals miss them) and offers no way to set one. So the harness
// starts them through itself: each cluster's bin directory links etcd and
// kube-apiserver to this executable, which, started under one of those names
// with launcherDirEnv set, becomes a launcher of the real binary (launch, per
// platform: on Linux it asks for SIGKILL at its parent's death and executes
// the real binary, the signal surviving exec; elsewhere it runs the real
// binary in a process group of its own and kills that group when its parent
// dies). Commands the harness's users start themselves go through the same
// launcher where there is no parent-death signal (BindToParent).
const (
	// launcherDirEnv names the directory of the real binaries.
	launcherDirEnv = "SG_HARNESS_LAUNCH_FROM"
	// launcherParentEnv is the harness process's pid: a launcher whose
	// parent died before it was set up must not run on as an orphan.
	launcherParentEnv = "SG_HARNESS_LAUNCHER_PARENT"
	// launchEnv names the real binary of a command started through
	// BindToParent, and launchSignalEnv the signal it gets when its parent
	// dies.
	launchEnv       = "SG_HARNESS_LAUNCH"
	launchSignalEnv = "SG_HARNESS_LAUNCH_SIGNAL"
)

// launchedBinaries are the control-plane programs envtest starts.
var launchedBinaries = []string{"etcd", "kube-apiserver"}

func init() {
	name := filepath.Base(os.Args[0])
	real, sig := "", syscall.SIGKILL
	switch {
	case os.Getenv(launchEnv) != "":
		real = os.Getenv(launchEnv)
		if n, err := strconv.Atoi(os.Getenv(launchSignalEnv)); err == nil {
			sig = syscall.Signal(n)
		}
	case os.Getenv(launcherDirEnv) != "" && slices.Contains(launchedBinaries, name):
		real = filepath.Join(os.Getenv(launcherDirEnv), name)
	default:
		return
	}
	if parent := os.Getenv(launcherParentEnv); parent != strconv.Itoa(os.Getppid()) {
		fmt.Fprintf(os.Stderr, "harness launcher for %s: the harness process is gone\n", name)
		os.Exit(1)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		for _, v := range []string{launcherDirEnv, launcherParentEnv, launchEnv, launchSignalEnv} {
			if strings.HasPrefix(kv, v+"=") {
				return true
			}
		}
		return false
	})
	if err := launch(real, os.Args, env, sig); err != nil {
		fmt.Fprintf(os.Stderr, "harness launcher for %s: %v\n", name, err)
		os.Exit(1)
	}
}

// BindToParent makes cmd's process get sig when this process dies, however
// it dies: a parent-death signal on Linux, the launcher elsewhere. Call it
// before cmd starts.
func BindToParent(cmd *exec.Cmd, sig syscall.Signal) error {
	return bindToParent(cmd, sig)
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
func ProcessesWithEnv(kv string) []string { return processesWithEnv(kv) }

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
