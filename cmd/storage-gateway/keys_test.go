package main_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcm-project/storage-gateway/internal/secrets"
	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// run executes the binary with env and returns its combined output.
func run(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"HOME=" + t.TempDir()}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustRun(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, err := run(t, env, args...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return out
}

// migratedDatabase returns the env of a migrated test database.
func migratedDatabase(t *testing.T) (pgtest.Database, []string) {
	t.Helper()
	db := pgtest.NewDatabase(t)
	env := []string{"SG_DATABASE_URL=" + db.URL}
	mustRun(t, env, "migrate")
	return db, env
}

// insertSealed stores an environment row whose credentials are sealed with
// the ring's primary key, as the registry would.
func insertSealed(t *testing.T, db pgtest.Database, ringFile, id string) {
	t.Helper()
	ring, err := secrets.LoadKeyRing(ringFile)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := ring.Seal(id, 1, []byte(`{"token":"sealed-canary-token"}`))
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, db, `INSERT INTO environments (id, namespace, server, auth_type, credentials_key_id, credentials, credentials_generation)
		VALUES ($1, 'ns', 'https://cluster.example.com', 'token', $2, $3, $4)`, id, sealed.KeyID, sealed.Blob, sealed.Generation)
}

func execSQL(t *testing.T, db pgtest.Database, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

func TestKeyRotationCommands(t *testing.T) {
	db, env := migratedDatabase(t)
	ring := newKeyRing(t)
	env = append(env, "SG_KEY_RING_FILE="+ring)
	insertSealed(t, db, ring, "a")
	insertSealed(t, db, ring, "b")

	if out, err := run(t, env, "keys", "init"); err == nil || !strings.Contains(out, "refusing to overwrite") {
		t.Fatalf("init over an existing ring: %v %s", err, out)
	}
	mustRun(t, env, "keys", "add", "k2")
	mustRun(t, env, "keys", "promote", "k2")
	if out, err := run(t, env, "keys", "retire", "k1"); err == nil || !strings.Contains(out, "still seals 2 environment(s)") {
		t.Fatalf("retire of a used key: %v %s", err, out)
	}
	if out := mustRun(t, env, "keys", "rewrap"); !strings.Contains(out, "re-sealed 2 environment(s) with key k2") {
		t.Fatalf("rewrap: %s", out)
	}
	if out := mustRun(t, env, "keys", "list"); !strings.Contains(out, "k1   false    0") || !strings.Contains(out, "k2   true     2") {
		t.Fatalf("list after rewrap:\n%s", out)
	}
	mustRun(t, env, "keys", "retire", "k1")
	data, err := os.ReadFile(ring)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"k1"`) {
		t.Fatal("retired key still in the ring file")
	}
	if out, err := run(t, env, "keys", "retire", "k2"); err == nil {
		t.Fatalf("retiring the primary succeeded: %s", out)
	}
	fi, err := os.Stat(ring)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ring file mode: %v %v", fi, err)
	}
}

// TestKeysListNamesKeysThatCannotOpenTheirCredentials: a key ring whose k1
// has other bytes than the k1 that sealed the rows (another installation's
// file) must not be reported as sealing them fine.
func TestKeysListNamesKeysThatCannotOpenTheirCredentials(t *testing.T) {
	db, env := migratedDatabase(t)
	ring := newKeyRing(t)
	insertSealed(t, db, ring, "a")
	insertSealed(t, db, ring, "b")
	out := mustRun(t, append(env, "SG_KEY_RING_FILE="+ring), "keys", "list")
	if !strings.Contains(out, "k1   true     2") || strings.Contains(out, "cannot open") {
		t.Fatalf("list with the sealing ring:\n%s", out)
	}

	other := newKeyRing(t) // a k1 of other bytes
	mustRun(t, []string{"SG_KEY_RING_FILE=" + other}, "keys", "add", "k9")
	out, err := run(t, append(env, "SG_KEY_RING_FILE="+other), "keys", "list")
	if err == nil || !strings.Contains(out, "key k1 cannot open the credentials of a, b") || !strings.Contains(out, "a,b") {
		t.Fatalf("list with a foreign ring: %v\n%s", err, out)
	}
	if !strings.Contains(out, "k9   false    0") {
		t.Fatalf("unused key missing from the list:\n%s", out)
	}

	// A row under a key the file lacks is listed too.
	lost := newKeyRing(t)
	mustRun(t, []string{"SG_KEY_RING_FILE=" + lost}, "keys", "add", "lost")
	mustRun(t, []string{"SG_KEY_RING_FILE=" + lost}, "keys", "promote", "lost")
	insertSealed(t, db, lost, "c")
	out, err = run(t, append(env, "SG_KEY_RING_FILE="+ring), "keys", "list")
	if err == nil || !strings.Contains(out, "lost  (not in the file)  1") || !strings.Contains(out, "the file has no key lost, which sealed the credentials of c") {
		t.Fatalf("list with a key missing from the file: %v\n%s", err, out)
	}
}

func TestServeRefusesWithoutAUsableKeyRing(t *testing.T) {
	db, env := migratedDatabase(t)
	tokenFile, _ := gatewayproc.NewAdminToken(t, binary)
	base := append(env, "SG_LISTEN_ADDR=127.0.0.1:0", "SG_EMBEDDED_NATS_LISTEN=off", "SG_STATE_DIR="+t.TempDir(), "SG_AUTH_TOKEN_FILE="+tokenFile)

	out, err := run(t, base, "serve")
	if err == nil || !strings.Contains(out, "SG_KEY_RING_FILE") {
		t.Fatalf("serve without a key ring: %v %s", err, out)
	}

	// A row sealed with a key the ring lacks: refuse to start, naming it.
	other := newKeyRing(t)
	mustRun(t, []string{"SG_KEY_RING_FILE=" + other}, "keys", "add", "lost")
	mustRun(t, []string{"SG_KEY_RING_FILE=" + other}, "keys", "promote", "lost")
	insertSealed(t, db, other, "orphan")
	out, err = run(t, append(base, "SG_KEY_RING_FILE="+newKeyRing(t)), "serve")
	if err == nil || !strings.Contains(out, "keys missing from the key ring: lost (1 environments)") {
		t.Fatalf("serve with an unknown key in use: %v %s", err, out)
	}
	if strings.Contains(out, "sealed-canary-token") {
		t.Fatal("plaintext credentials in the output")
	}
}

func TestServeReloadsTheKeyRingOnSIGHUP(t *testing.T) {
	db, env := migratedDatabase(t)
	ring := newKeyRing(t)
	insertSealed(t, db, ring, "a")
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": db.URL, "SG_KEY_RING_FILE": ring})

	keysEnv := append(env, "SG_KEY_RING_FILE="+ring)
	mustRun(t, keysEnv, "keys", "add", "k2")
	mustRun(t, keysEnv, "keys", "promote", "k2")
	if err := g.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.WaitLog(t, `"msg":"key ring loaded","audit":true,"primary":"k2","keys":["k1","k2"]`, 10*time.Second)

	// A ring whose k1 has other bytes cannot open what k1 sealed: refused.
	data, err := os.ReadFile(newKeyRing(t))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ring, data)
	if err := g.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.WaitLog(t, `key ring not reloaded; keeping the current one","error":"keys that open none of the credentials they sealed (same id, different key bytes?): k1`, 10*time.Second)
	if code, _ := g.get(t, "/readyz"); code != 200 {
		t.Fatalf("gateway not ready after a refused reload: %d", code)
	}
}
