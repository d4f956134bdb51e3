//go:build unix

package secrets

import (
	"os"
	"slices"
	"syscall"
)

// sharedWithOurGroup reports a file another user owns whose group is one of
// the process's groups (its effective group or a supplementary one, such
// as a pod's fsGroup).
func sharedWithOurGroup(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() {
		return false
	}
	if int(st.Gid) == os.Getegid() {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, int(st.Gid))
}
