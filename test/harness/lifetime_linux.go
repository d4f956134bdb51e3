package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// launch becomes the real binary, set to get sig when its parent dies (the
// parent-death signal survives exec).
func launch(real string, args, env []string, sig syscall.Signal) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0); err != nil {
		return err
	}
	// The parent may have died before the signal was set.
	if parent := os.Getenv(launcherParentEnv); parent != "" && parent != strconv.Itoa(os.Getppid()) {
		return os.ErrProcessDone
	}
	return syscall.Exec(real, args, env)
}

func bindToParent(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
	return nil
}

// SignalOnParentDeath has the kernel send this process sig when its parent
// dies.
func SignalOnParentDeath(sig syscall.Signal) error {
	return unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0)
}

// processesWithEnv reads /proc.
func processesWithEnv(kv string) []string {
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
