package secrets_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// Blob layout offsets, as documented in seal.go.
const (
	overhead       = 89 // version + wrapped DEK (12+32+16) + data nonce and tag (12+16)
	dataSectionOff = 61 // where the data nonce starts
)

func TestSealOpenRoundTrip(t *testing.T) {
	ring := newRing(t, "k2")
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	tests := []struct {
		name      string
		rowID     string
		plaintext []byte
	}{
		{"empty", "row-1", nil},
		{"one byte", "row-1", []byte{0}},
		{"token", "4f9c2d7e-0a1b-4c3d-8e9f-123456789abc", []byte("eyJhbGciOiJSUzI1NiJ9.payload.signature")},
		{"every byte value", "row-2", allBytes},
		{"unicode row id", "ligne-é-行", []byte(canary)},
		{"exactly 1 MiB", "row-3", bytes.Repeat([]byte{0xa5}, 1<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := seal(t, ring, tt.rowID, tt.plaintext)
			if s.KeyID != "k1" {
				t.Fatalf("sealed with key %q, want the primary k1", s.KeyID)
			}
			if len(s.Blob) != overhead+len(tt.plaintext) {
				t.Fatalf("blob is %d bytes, want %d", len(s.Blob), overhead+len(tt.plaintext))
			}
			if len(tt.plaintext) >= 16 && bytes.Contains(s.Blob, tt.plaintext) {
				t.Fatal("blob contains the plaintext")
			}
			got, err := ring.Open(tt.rowID, s)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.plaintext) {
				t.Fatal("opened plaintext differs from the sealed one")
			}
		})
	}
}

func TestSealIsFreshEachTime(t *testing.T) {
	ring := newRing(t)
	a := seal(t, ring, "row-1", []byte(canary))
	b := seal(t, ring, "row-1", []byte(canary))
	sections := []struct {
		name       string
		start, end int
	}{
		{"wrapped DEK nonce", 1, 13},
		{"wrapped DEK", 13, dataSectionOff},
		{"data nonce", dataSectionOff, dataSectionOff + 12},
		{"data ciphertext and tag", dataSectionOff + 12, len(a.Blob)},
	}
	for _, sec := range sections {
		if bytes.Equal(a.Blob[sec.start:sec.end], b.Blob[sec.start:sec.end]) {
			t.Errorf("two seals of the same plaintext share the %s", sec.name)
		}
	}
}

func TestRotationKeepsOldRowsOpen(t *testing.T) {
	ring := newRing(t)
	old := seal(t, ring, "row-1", []byte("old credential"))
	if err := ring.Add("k2"); err != nil {
		t.Fatal(err)
	}
	if s := seal(t, ring, "row-1", nil); s.KeyID != "k1" {
		t.Fatalf("an added key was used before promotion: sealed with %q", s.KeyID)
	}
	if err := ring.Promote("k2"); err != nil {
		t.Fatal(err)
	}
	fresh := seal(t, ring, "row-2", []byte("new credential"))
	if fresh.KeyID != "k2" {
		t.Fatalf("after promotion sealed with %q, want k2", fresh.KeyID)
	}
	for _, c := range []struct {
		row  string
		s    secrets.Sealed
		want string
	}{{"row-1", old, "old credential"}, {"row-2", fresh, "new credential"}} {
		got, err := ring.Open(c.row, c.s)
		if err != nil || string(got) != c.want {
			t.Fatalf("open %s (key %s) = %q, %v; want %q", c.row, c.s.KeyID, got, err, c.want)
		}
	}
	if err := ring.Remove("k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Open("row-1", old); !errors.Is(err, secrets.ErrUnknownKey) {
		t.Fatalf("opening a row sealed with a removed key: got %v, want ErrUnknownKey", err)
	}
}

// attempt is one Open call a test expects to fail.
type attempt struct {
	rowID string
	s     secrets.Sealed
}

func TestOpenRejectsTampering(t *testing.T) {
	ring := newRing(t, "k2")
	orig := seal(t, ring, "row-1", []byte(canary))
	other := seal(t, ring, "row-1", []byte(canary))
	blob := orig.Blob
	tests := []struct {
		name     string
		attempts []attempt
		want     error
	}{
		{"every bit flipped", bitFlips(orig), secrets.ErrDecrypt},
		{"truncated at every length", truncations(orig), secrets.ErrDecrypt},
		{"byte appended", []attempt{{"row-1", sealed("k1", blob, 0)}}, secrets.ErrDecrypt},
		{"other row", []attempt{{"row-2", orig}, {"row-1 ", orig}, {"row-", orig}}, secrets.ErrDecrypt},
		{"key id relabelled to another existing key", []attempt{{"row-1", sealed("k2", blob)}}, secrets.ErrDecrypt},
		{"unknown key id", []attempt{{"row-1", sealed("k9", blob)}, {"row-1", sealed("", blob)}}, secrets.ErrUnknownKey},
		{"wrapped DEK from another blob", []attempt{
			{"row-1", spliced(orig, other)},
			{"row-1", spliced(other, orig)},
		}, secrets.ErrDecrypt},
		{"wrong version byte", []attempt{
			{"row-1", withVersion(orig, 0)},
			{"row-1", withVersion(orig, 2)},
			{"row-1", withVersion(orig, 0xff)},
		}, secrets.ErrDecrypt},
		{"empty and nil blob", []attempt{{"row-1", sealed("k1", nil)}, {"row-1", sealed("k1", []byte{})}}, secrets.ErrDecrypt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, a := range tt.attempts {
				got, err := ring.Open(a.rowID, a.s)
				if !errors.Is(err, tt.want) {
					t.Fatalf("attempt %d: Open = %q, %v; want %v", i, got, err, tt.want)
				}
				if got != nil {
					t.Fatalf("attempt %d: failed Open returned data", i)
				}
				assertNoCanary(t, err)
			}
		})
	}
	if got, err := ring.Open("row-1", orig); err != nil || string(got) != canary {
		t.Fatalf("the untouched blob no longer opens: %v", err)
	}
}

// ErrDecrypt must carry no detail, so callers cannot build an oracle from it.
func TestErrDecryptIsBare(t *testing.T) {
	ring := newRing(t)
	s := seal(t, ring, "row-1", []byte(canary))
	_, err := ring.Open("row-2", s)
	if err != secrets.ErrDecrypt { //nolint:errorlint // identity, not just errors.Is, is the point
		t.Fatalf("got %v, want exactly ErrDecrypt", err)
	}
}

func TestSealAndOpenRefuseBadInput(t *testing.T) {
	ring := newRing(t)
	valid := seal(t, ring, "row-1", []byte(canary))
	tests := []struct {
		name    string
		call    func() error
		wantMsg string
	}{
		{"seal without row id", func() error {
			_, err := ring.Seal("", 1, []byte(canary))
			return err
		}, "row id must not be empty"},
		{"seal without generation", func() error {
			_, err := ring.Seal("row-1", 0, []byte(canary))
			return err
		}, "generation must be positive"},
		{"open without row id", func() error {
			_, err := ring.Open("", valid)
			return err
		}, "row id must not be empty"},
		{"seal over 1 MiB", func() error {
			_, err := ring.Seal("row-1", 1, []byte(strings.Repeat(canary, (1<<20)/len(canary)+1)))
			return err
		}, "exceeds the limit of 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantMsg)
			}
			assertNoCanary(t, err)
		})
	}
}

func assertNoCanary(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), canary[:12]) {
		t.Fatalf("error text contains the plaintext: %v", err)
	}
}

func sealed(keyID string, blob []byte, extra ...byte) secrets.Sealed {
	return secrets.Sealed{KeyID: keyID, Blob: append(bytes.Clone(blob), extra...)}
}

func bitFlips(s secrets.Sealed) []attempt {
	var out []attempt
	for i := range s.Blob {
		for bit := range 8 {
			b := bytes.Clone(s.Blob)
			b[i] ^= 1 << bit
			out = append(out, attempt{"row-1", sealed(s.KeyID, b)})
		}
	}
	return out
}

func truncations(s secrets.Sealed) []attempt {
	var out []attempt
	for n := range len(s.Blob) {
		out = append(out, attempt{"row-1", sealed(s.KeyID, s.Blob[:n])})
	}
	return out
}

// spliced keeps data's version and data section but takes the wrapped DEK
// from dek: both halves are individually authentic, only the pairing is new.
func spliced(data, dek secrets.Sealed) secrets.Sealed {
	b := bytes.Clone(data.Blob)
	copy(b[1:dataSectionOff], dek.Blob[1:dataSectionOff])
	return sealed(data.KeyID, b)
}

func withVersion(s secrets.Sealed, v byte) secrets.Sealed {
	b := bytes.Clone(s.Blob)
	b[0] = v
	return sealed(s.KeyID, b)
}
