package main_test

import (
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// Two replicas started with the same SG_MEMBER_ID (the host name by
// default: any two on one host): the second takes the id, as a restart
// would, and the first is told so, stops being ready and exits non-zero
// with an error naming SG_MEMBER_ID — never two processes silently sharing
// one identity.
func TestASecondReplicaWithTheSameMemberIDStopsTheFirst(t *testing.T) {
	env := map[string]string{"SG_DATABASE_URL": pgtest.NewDatabase(t).URL, "SG_MEMBER_ID": "twin"}
	first := startGateway(t, env)
	first.waitReady(t, http.StatusOK, 30*time.Second)
	second := startGateway(t, env)
	second.waitReady(t, http.StatusOK, 30*time.Second)
	select {
	case err := <-first.Done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("the replaced replica exited with %v, want a non-zero exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the replaced replica still runs 30 s after another took its member id")
	}
	if logs := first.Logs(); !strings.Contains(logs, "SG_MEMBER_ID") {
		t.Fatalf("the replaced replica's log does not name SG_MEMBER_ID:\n%s", logs)
	}
	second.waitReady(t, http.StatusOK, 10*time.Second)
}
