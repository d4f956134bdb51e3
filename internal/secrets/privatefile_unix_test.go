//go:build unix

package secrets_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// readAsEnv makes this test binary, re-run, read the file it names with
// ReadPrivateFile and exit 0 (read) or 3 (refused).
const readAsEnv = "SECRETS_TEST_READ_PRIVATE_FILE"

func TestMain(m *testing.M) {
	if path := os.Getenv(readAsEnv); path != "" {
		if _, err := secrets.ReadPrivateFile(path, 1<<10); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A Secret the kubelet mounts for a pod with fsGroup — owned by root, mode
// 0440, group the pod's fsGroup — is readable by the gateway running as a
// non-root user in that group; the same file shared with another group, with
// others, or writable by the group is not.
func TestReadPrivateFileAcceptsASecretMountedForOurGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the file must belong to another user than the reader")
	}
	const uid, gid, otherUID, otherGID = 65532, 65532, 65533, 65533
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the reader must reach the file
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The reader runs this test binary, from where it may execute it.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	reader := filepath.Join(dir, "reader")
	if err := os.WriteFile(reader, self, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		uid  int
		gid  int
		mode os.FileMode
		ok   bool
	}{
		{"root-owned, our group may read", 0, gid, 0o440, true},
		{"root-owned, read-only for root", 0, gid, 0o400, false}, // we cannot even open it
		{"another group may read", 0, otherGID, 0o440, false},
		{"others may read", 0, gid, 0o444, false},
		{"our group may write", 0, gid, 0o460, false},
		// Anyone may give a file of theirs to a group they share with us.
		{"another user's, our group may read", otherUID, gid, 0o440, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, tc.uid, tc.gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(reader, "-test.run=^$")
			cmd.Env = append(os.Environ(), readAsEnv+"="+path)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v %s", err, out)
			case !tc.ok && (!errors.As(err, &exit) || exit.ExitCode() != 3):
				t.Fatalf("read %v (%s), want ReadPrivateFile to refuse it", err, out)
			}
		})
	}

	// The reader's own file stays refused when its group may read it.
	own := filepath.Join(dir, "own")
	if err := os.WriteFile(own, []byte("secret"), 0o440); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.ReadPrivateFile(own, 1<<10); err == nil || !strings.Contains(err.Error(), "accessible by group or others") {
		t.Fatalf("own group-readable file: %v, want a refusal", err)
	}
}
