//go:build !linux

package harness

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// launch runs the real binary in a process group of its own, passes it the
// signals this launcher gets, and kills the group with sig once the
// parent is gone (its pid changes: the orphan was adopted); it exits as the
// real binary does. There is no parent-death signal to ask for here.
func launch(real string, args, env []string, sig syscall.Signal) error {
	parent := os.Getppid()
	cmd := exec.Command(real, args[1:]...)
	cmd.Args[0] = args[0]
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	orphaned := time.NewTicker(500 * time.Millisecond)
	defer orphaned.Stop()
	for {
		select {
		case s := <-signals:
			_ = cmd.Process.Signal(s)
		case <-orphaned.C:
			if os.Getppid() != parent {
				_ = syscall.Kill(-cmd.Process.Pid, sig)
			}
		case err := <-exited:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				os.Exit(exit.ExitCode())
			}
			if err != nil {
				return err
			}
			os.Exit(0)
		}
	}
}

// bindToParent runs cmd through this executable as its launcher.
func bindToParent(cmd *exec.Cmd, sig syscall.Signal) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, launchEnv+"="+cmd.Path, launchSignalEnv+"="+strconv.Itoa(int(sig)),
		launcherParentEnv+"="+strconv.Itoa(os.Getpid()))
	cmd.Path = self
	return nil
}

// SignalOnParentDeath sends this process sig once its parent is gone (its
// parent pid changes), checked twice a second by a goroutine that lives as
// long as the process.
func SignalOnParentDeath(sig syscall.Signal) error {
	parent := os.Getppid()
	go func() {
		for range time.Tick(500 * time.Millisecond) {
			if os.Getppid() != parent {
				_ = syscall.Kill(os.Getpid(), sig)
				return
			}
		}
	}()
	return nil
}

// processesWithEnv asks ps for every process's environment (-E), which it
// prints after the command line.
func processesWithEnv(kv string) []string {
	out, err := exec.Command("ps", "-axww", "-E", "-o", "pid=,stat=,command=").Output()
	if err != nil {
		return nil
	}
	var found []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || strings.HasPrefix(fields[1], "Z") || !strings.Contains(" "+line+" ", " "+kv+" ") {
			continue
		}
		found = append(found, fields[0]+" "+strings.Join(fields[2:], " "))
	}
	return found
}
