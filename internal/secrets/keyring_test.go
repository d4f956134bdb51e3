package secrets_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/secrets"
)

func randomKey(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// assertNoKeyMaterial fails if text holds any of the base64 keys, whole or
// by a recognisable prefix, or their decoded bytes.
func assertNoKeyMaterial(t *testing.T, text string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		raw, _ := base64.StdEncoding.DecodeString(k)
		if strings.Contains(text, k[:12]) || (len(raw) > 0 && strings.Contains(text, string(raw[:8]))) {
			t.Fatalf("text contains key material: %s", text)
		}
	}
}

func TestParseKeyRingRejectsBadFiles(t *testing.T) {
	good := randomKey(t, 32)
	short := randomKey(t, 31)
	long := randomKey(t, 33)
	badB64 := good[:20] + "*" + good[21:]
	file := func(rest string) string { return fmt.Sprintf(`{"primary": "k1", "keys": {"k1": %q%s}}`, good, rest) }
	tests := []struct {
		name    string
		data    string
		wantErr string
	}{
		{"not JSON", "primary = k1", "key ring: not valid JSON (syntax error at byte offset 1)"},
		{"empty file", "", "key ring: not valid JSON (unexpected end of input)"},
		{"cut short", file("")[:40], "key ring: not valid JSON"},
		{"not an object", `["k1"]`, "key ring: the file must be a JSON object"},
		{"unknown field", `{"primary": "k1", "keys": {"k1": "` + good + `"}, "comment": "x"}`, `key ring: unknown field "comment"`},
		{"missing primary", `{"keys": {"k1": "` + good + `"}}`, "key ring: primary is missing"},
		{"primary not a string", `{"primary": 1, "keys": {"k1": "` + good + `"}}`, "key ring: primary must be a JSON string"},
		{"primary not in keys", `{"primary": "x", "keys": {"k1": "` + good + `"}}`, `key ring: primary "x" is not in keys`},
		{"key of 31 bytes", file(`, "k2": "` + short + `"`), `key ring: key "k2" must be exactly 32 bytes after base64 decoding (got 31)`},
		{"key of 33 bytes", file(`, "k2": "` + long + `"`), `key ring: key "k2" must be exactly 32 bytes after base64 decoding (got 33)`},
		{"bad base64", file(`, "k2": "` + badB64 + `"`), `key ring: key "k2" is not valid standard base64`},
		{"url-safe base64", file(`, "k2": "` + strings.NewReplacer("+", "-", "/", "_").Replace(good) + `-_"`), `key ring: key "k2" is not valid standard base64`},
		{"key not a string", file(`, "k2": 12345`), `key ring: key "k2" must be a JSON string`},
		{"key null", file(`, "k2": null`), `key ring: key "k2" must be a JSON string`},
		{"control character in key", file(`, "k2": "` + good[:10] + "\x01" + good[10:] + `"`), "key ring: not valid JSON (syntax error at byte offset"},
		{"upper-case id", file(`, "K2": "` + good + `"`), `key ring: key id "K2" is invalid: it must match ^[a-z0-9][a-z0-9._-]{0,62}$`},
		{"id starting with a dash", file(`, "-k2": "` + good + `"`), `key ring: key id "-k2" is invalid`},
		{"id of 64 characters", file(`, "` + strings.Repeat("a", 64) + `": "` + good + `"`), "is invalid"},
		{"empty id", file(`, "": "` + good + `"`), `key ring: key id "" is invalid`},
		{"empty keys", `{"primary": "k1", "keys": {}}`, "key ring: keys must not be empty"},
		{"keys missing", `{"primary": "k1"}`, "key ring: keys must not be empty"},
		{"keys null", `{"primary": "k1", "keys": null}`, "key ring: keys must be a JSON object"},
		{"duplicate key id", file(`, "k1": "` + long + `"`), `key ring: "k1" appears more than once in keys`},
		{"duplicate field", `{"primary": "k1", "primary": "k2", "keys": {"k1": "` + good + `"}}`, `key ring: "primary" appears more than once in the file`},
		{"trailing data", file("") + ` {}`, "key ring: unexpected data after the JSON object"},
		{"trailing garbage", file("") + ` x`, "key ring: unexpected data after the JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ring, err := secrets.ParseKeyRing([]byte(tt.data))
			if err == nil {
				t.Fatalf("parsed a bad file into %v", ring)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
			assertNoKeyMaterial(t, err.Error(), good, short, long, badB64)
		})
	}
}

func TestParseKeyRingAcceptsValidFile(t *testing.T) {
	k1, k2 := randomKey(t, 32), randomKey(t, 32)
	data := fmt.Sprintf(`{"primary": "k2", "keys": {"k2": %q, "k1.old_2024-01": %q}}`, k2, k1)
	ring, err := secrets.ParseKeyRing([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if ring.Primary() != "k2" || !slices.Equal(ring.IDs(), []string{"k1.old_2024-01", "k2"}) {
		t.Fatalf("primary %q, ids %q", ring.Primary(), ring.IDs())
	}
}

func TestLoadKeyRingRefusesAccessibleFile(t *testing.T) {
	data := fileBytes(t, newRing(t))
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o610, 0o601} {
		t.Run(mode.String(), func(t *testing.T) {
			path := writeWithMode(t, data, mode)
			_, err := secrets.LoadKeyRing(path)
			if err == nil || !strings.Contains(err.Error(), "accessible by group or others") || !strings.Contains(err.Error(), "chmod 600 "+path) {
				t.Fatalf("got %v, want a refusal telling to chmod 600", err)
			}
		})
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		t.Run(mode.String(), func(t *testing.T) {
			if _, err := secrets.LoadKeyRing(writeWithMode(t, data, mode)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLoadKeyRingReportsPathAndProblem(t *testing.T) {
	key := randomKey(t, 31)
	path := writeWithMode(t, []byte(`{"primary": "k1", "keys": {"k1": "`+key+`"}}`), 0o600)
	_, err := secrets.LoadKeyRing(path)
	want := "key ring " + path + `: key "k1" must be exactly 32 bytes`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	assertNoKeyMaterial(t, err.Error(), key)
	if _, err := secrets.LoadKeyRing(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: got %v, want os.ErrNotExist", err)
	}
	if _, err := secrets.LoadKeyRing(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory: got %v", err)
	}
}

func writeWithMode(t *testing.T, data []byte, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keyring.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestWriteFileRoundTrips(t *testing.T) {
	ring := newRing(t, "k2")
	if err := ring.Promote("k2"); err != nil {
		t.Fatal(err)
	}
	s := seal(t, ring, "row-1", []byte(canary))
	dir := t.TempDir()
	path := filepath.Join(dir, "keyring.json")
	// An existing, too-open file is replaced, not rewritten in place.
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ring.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, want 0600", info.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	loaded, err := secrets.LoadKeyRing(path)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Primary() != "k2" || !slices.Equal(loaded.IDs(), []string{"k1", "k2"}) {
		t.Fatalf("loaded primary %q ids %q", loaded.Primary(), loaded.IDs())
	}
	if got, err := loaded.Open("row-1", s); err != nil || string(got) != canary {
		t.Fatalf("loaded ring cannot open what the original sealed: %v", err)
	}
}

func TestWriteFileFailsInMissingDirectory(t *testing.T) {
	err := newRing(t).WriteFile(filepath.Join(t.TempDir(), "nope", "keyring.json"))
	if err == nil || !strings.HasPrefix(err.Error(), "key ring: ") {
		t.Fatalf("got %v, want a key ring error", err)
	}
}

func TestWriteFileWritesTheFileFormat(t *testing.T) {
	ring := newRing(t, "k2")
	data := fileBytes(t, ring)
	var f struct {
		Primary string            `json:"primary"`
		Keys    map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if f.Primary != "k1" || len(f.Keys) != 2 {
		t.Fatalf("unexpected file %+v", f)
	}
	for id, k := range f.Keys {
		if raw, err := base64.StdEncoding.DecodeString(k); err != nil || len(raw) != 32 {
			t.Fatalf("key %s is not 32 bytes of standard base64", id)
		}
	}
	if !bytes.Contains(data, []byte("\n  ")) {
		t.Fatal("file is not indented")
	}
}

func TestKeyRingMutations(t *testing.T) {
	ring := newRing(t, "k2")
	tests := []struct {
		name    string
		call    func() error
		wantErr string
		wantIs  error
	}{
		{"add duplicate", func() error { return ring.Add("k2") }, `secrets: key "k2" already exists`, nil},
		{"add invalid id", func() error { return ring.Add("Bad Id") }, `secrets: key id "Bad Id" is invalid`, nil},
		{"promote unknown", func() error { return ring.Promote("k9") }, `secrets: unknown key id: "k9"`, secrets.ErrUnknownKey},
		{"remove primary", func() error { return ring.Remove("k1") }, `secrets: key "k1" is the primary; promote another key before removing it`, nil},
		{"remove unknown", func() error { return ring.Remove("k9") }, `"k9"`, secrets.ErrUnknownKey},
		{"new ring with invalid id", func() error {
			_, err := secrets.NewKeyRing("")
			return err
		}, `key id "" is invalid`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("got %v, want errors.Is %v", err, tt.wantIs)
			}
		})
	}
	if ring.Primary() != "k1" || !slices.Equal(ring.IDs(), []string{"k1", "k2"}) {
		t.Fatalf("failed calls changed the ring: primary %q ids %q", ring.Primary(), ring.IDs())
	}
	if err := ring.Remove("k2"); err != nil || slices.Contains(ring.IDs(), "k2") {
		t.Fatalf("removing a non-primary key: %v", err)
	}
}

// A ring that reaches fmt or a structured logger must show ids only.
func TestKeyRingNeverPrintsKeys(t *testing.T) {
	ring := newRing(t, "k2")
	data := fileBytes(t, ring)
	var f struct{ Keys map[string]string }
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Keys) != 2 {
		t.Fatalf("the ring file holds %d keys, want k1 and k2", len(f.Keys))
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("ring", "ring", ring)
	printed := fmt.Sprintf("%v %+v %#v %s %x %q", ring, ring, ring, ring, ring, ring) + logged.String()
	for _, k := range f.Keys {
		assertNoKeyMaterial(t, printed, k)
	}
	if !strings.Contains(printed, "primary: k1, keys: [k1 k2]") {
		t.Fatalf("printed form lacks the ids: %s", printed)
	}
}

// fileBytes is what WriteFile writes for ring.
func fileBytes(t *testing.T, ring *secrets.KeyRing) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ring.json")
	if err := ring.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
