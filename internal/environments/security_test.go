package environments_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// storedCredentials reads a row's sealed credentials and their generation.
func storedCredentials(t *testing.T, reg *registrytest.Fixture, id string) (blob []byte, gen int64) {
	t.Helper()
	if err := reg.DB.QueryRow(context.Background(), `SELECT credentials, credentials_generation FROM environments WHERE id = $1`, id).Scan(&blob, &gen); err != nil {
		t.Fatal(err)
	}
	return blob, gen
}

// A database writer who restores the credentials saved before a rotation
// does not make the gateway use them: the blob is bound to the generation the
// row holds, and a process that has seen a newer generation refuses an
// older one even when the generation is restored too. An environment
// deleted and registered again under its id does not accept the old blob.
func TestRolledBackCredentialsAreRefused(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	if _, _, err := reg.Registry.Register(ctx, registration(t, "east")); err != nil {
		t.Fatal(err)
	}
	oldBlob, oldGen := storedCredentials(t, reg, "east")
	if oldGen <= 0 {
		t.Fatalf("a new registration holds generation %d", oldGen)
	}
	newToken, err := cluster.NewGatewayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Registry.Update(ctx, "east", mustJSON(t, map[string]any{"credentials": map[string]any{
		"server": cluster.ServerURL(), "certificate_authority_data": cluster.CAData(), "token": newToken}})); err != nil {
		t.Fatal(err)
	}
	_, rotatedGen := storedCredentials(t, reg, "east")
	if rotatedGen <= oldGen {
		t.Fatalf("rotation kept generation %d (was %d)", rotatedGen, oldGen)
	}
	restore := func(blob []byte, gen int64) {
		t.Helper()
		if _, err := reg.DB.Exec(ctx, `UPDATE environments SET credentials = $2, credentials_generation = $3 WHERE id = $1`, "east", blob, gen); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(svc *environments.Service, why string) {
		t.Helper()
		env, err := svc.Verify(ctx, "east")
		if err != nil {
			t.Fatal(err)
		}
		if env.Status.State != environments.StateUnauthorized || !strings.Contains(env.Status.Message, "cannot be used") {
			t.Fatalf("%s: the pre-rotation credentials were used: %+v", why, env.Status)
		}
	}
	// Only the blob restored: it is bound to the old generation.
	restore(oldBlob, rotatedGen)
	refused(reg.Registry, "old blob in the rotated row")
	// Blob and generation restored: this process has seen the newer one.
	restore(oldBlob, oldGen)
	refused(reg.Registry, "old blob and old generation")
	if !strings.Contains(reg.Logs.String(), "rolled back?") {
		t.Fatal("the rollback is not logged")
	}

	// Deleted and registered again: the old blob does not fit the new row.
	if err := reg.Registry.Delete(ctx, "east", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.Registry.Register(ctx, registration(t, "east")); err != nil {
		t.Fatal(err)
	}
	_, reborn := storedCredentials(t, reg, "east")
	fresh := reg.NewRegistry(t, registrytest.Options{}) // a process that never saw the old rows
	restore(oldBlob, reborn)
	refused(fresh, "an earlier row's blob in a re-created row")
	reg.AssertNoSecret(t, newToken, cluster.GatewayToken())
}

// One damaged credential concerns its environment alone, wherever it sorts:
// start-up proceeds and names it; only a key that opens none of its
// credentials stops the gateway.
func TestOneUnreadableRowDoesNotStopStartUp(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	for _, id := range []string{"a", "b", "c"} {
		if _, _, err := reg.Registry.Register(ctx, registration(t, id)); err != nil {
			t.Fatal(err)
		}
	}
	// flip inverts one byte of a sealed credential (setting it to a fixed
	// value would leave the one in 256 rows that held it intact).
	flip := func(id string) {
		t.Helper()
		if _, err := reg.DB.Exec(ctx, `UPDATE environments SET credentials = set_byte(credentials, 39, get_byte(credentials, 39) # 255) WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	flip("a") // the first by id: the one a sample check would have opened
	if err := reg.Registry.CheckKeys(ctx); err != nil {
		t.Fatalf("one damaged row stopped start-up: %v", err)
	}
	var reported []string
	for line := range strings.SplitSeq(reg.Logs.String(), "\n") {
		if strings.Contains(line, "cannot be opened") {
			reported = append(reported, line)
		}
	}
	if len(reported) != 1 || !strings.Contains(reported[0], `"environment":"a"`) {
		t.Fatalf("the damaged row is not reported on its own: %q", reported)
	}
	if env, err := reg.Registry.Verify(ctx, "b"); err != nil || env.Status.State != environments.StateReady {
		t.Fatalf("an intact environment after another's damage: %+v %v", env.Status, err)
	}
	// Re-sealing under a new key passes the damaged row by, naming it.
	if err := reg.Keys.Add("k2"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Keys.Promote("k2"); err != nil {
		t.Fatal(err)
	}
	n, unreadable, err := reg.Registry.Rewrap(ctx)
	if err != nil || n != 2 || strings.Join(unreadable, ",") != "a" {
		t.Fatalf("Rewrap past a damaged row = %d, %v, %v; want b and c re-sealed, a named", n, unreadable, err)
	}
	flip("b")
	flip("c")
	err = reg.Registry.CheckKeys(ctx)
	if err == nil || !strings.Contains(err.Error(), "k2 (2 environments)") || !strings.Contains(err.Error(), "open none") {
		t.Fatalf("CheckKeys with no credential of k2 opening: %v", err)
	}
}

// A replay of a registration answers 200 only to the subject that
// registered it; anyone else gets the same 409 whether or not the
// credentials they sent are the stored ones.
func TestReplaysCompareCredentialsOnlyForTheRegisteringSubject(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	in := registration(t, "east")
	in.RegisteredBy = "alice"
	if _, created, err := reg.Registry.Register(ctx, in); err != nil || !created {
		t.Fatal(err)
	}
	if _, created, err := reg.Registry.Register(ctx, in); err != nil || created {
		t.Fatalf("alice's replay: created=%v %v", created, err)
	}
	guess := in
	guess.RegisteredBy = "mallory"
	_, _, right := reg.Registry.Register(ctx, guess)
	wrongToken := in
	wrongToken.RegisteredBy = "mallory"
	wrongToken.Credentials = environments.Credentials{Explicit: tokenConnection("a-wrong-guess")}
	wrongToken.Spec.Namespace = "dcm-volumes"
	_, _, wrong := reg.Registry.Register(ctx, wrongToken)
	a := wantKind(t, right, fault.AlreadyExists, "registered by someone else")
	b := wantKind(t, wrong, fault.AlreadyExists, "registered by someone else")
	if a != b {
		t.Fatalf("the answers tell right from wrong credentials apart: %+v vs %+v", a, b)
	}
}
