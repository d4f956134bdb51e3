package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// run executes the CLI with args against a gateway that does not exist:
// what these tests refuse is refused before any request is sent.
func run(t *testing.T, args ...string) error {
	t.Helper()
	root := NewRoot(&cobra.Command{Use: "serve"})
	root.SetArgs(args)
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	t.Setenv("SG_GATEWAY_URL", "http://127.0.0.1:1")
	return root.Execute()
}

// An empty id names nothing: refused here, not sent as the collection's
// path.
func TestAnEmptyArgumentIsRefusedLocally(t *testing.T) {
	for _, args := range [][]string{
		{"env", "get", ""}, {"env", "verify", ""}, {"env", "rm", ""}, {"env", "adopt", ""},
		{"volume", "get", "", "-e", "east"}, {"volume", "delete", "", "-e", "east"},
		{"volume", "snapshot", "get", "", "-e", "east"},
	} {
		err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "argument is empty") {
			t.Errorf("%v: %v, want the empty argument refused", args, err)
		}
	}
}

// The audit's filters are checked before they are sent: no events are
// ever at a time to come, and an action no event can carry is refused,
// listing those that can.
func TestAuditFiltersAreChecked(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	if got, err := timeFlag("5m", now); err != nil || !got.Equal(now.Add(-5*time.Minute)) {
		t.Errorf("timeFlag(5m) = %v, %v", got, err)
	}
	if _, err := timeFlag("-5m", now); err == nil || !strings.Contains(err.Error(), "not a negative one") {
		t.Errorf("timeFlag(-5m) = %v, want refused", err)
	}
	if err := run(t, "audit", "--since", "-5m"); err == nil || !strings.Contains(err.Error(), "--since") {
		t.Errorf("audit --since -5m: %v", err)
	}
	err := run(t, "audit", "--action", "deleteEverything")
	if err == nil || !strings.Contains(err.Error(), "not an audited operation") || !strings.Contains(err.Error(), "deleteEnvironment") {
		t.Errorf("audit --action deleteEverything: %v", err)
	}
	actions, err := api.AuditedActions()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"createVolume", "deleteEnvironment", "adoptVolumesTakingOver", "listAuditEvents"} {
		if !strings.Contains(strings.Join(actions, " "), want) {
			t.Errorf("audited actions %v lack %s", actions, want)
		}
	}
	for _, read := range []string{"getVolume", "listStorageClasses"} {
		for _, a := range actions {
			if a == read {
				t.Errorf("%s is not audited, yet listed", read)
			}
		}
	}
}

// --volume-mode takes either mode in any case, as --access-mode takes its
// modes, and names the choices otherwise.
func TestVolumeModeIsReadLeniently(t *testing.T) {
	for in, want := range map[string]api.VolumeMode{"block": api.Block, "Block": api.Block, "FILESYSTEM": api.Filesystem, "filesystem": api.Filesystem} {
		if got, err := volumeModeFlag(in); err != nil || got != want {
			t.Errorf("volumeModeFlag(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := volumeModeFlag("tape"); err == nil || !strings.Contains(err.Error(), "Filesystem or Block") {
		t.Errorf("volumeModeFlag(tape) = %v, want the choices named", err)
	}
	hints, err := kubernetesHints("", "", "rwo", "block")
	if err != nil || *hints.VolumeMode != api.Block || *hints.AccessMode != api.AccessModeReadWriteOnce {
		t.Errorf("kubernetesHints(rwo, block) = %+v, %v", hints, err)
	}
}
