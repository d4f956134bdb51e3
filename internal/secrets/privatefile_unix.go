//go:build unix

package secrets

import (
	"os"
	"slices"
	"syscall"
)

// sharedWithOurGroup reports a file root owns, the process not being root,
// whose group is one of the process's groups (its effective group or a
// supplementary one, such as a pod's fsGroup). Root only: any other user
// could chgrp a file of theirs to a group the process shares with others.
func sharedWithOurGroup(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 || os.Geteuid() == 0 {
		return false
	}
	if int(st.Gid) == os.Getegid() {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, int(st.Gid))
}
