package secrets_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// sealedInput identifies one Open call by value, so a map can hold every
// input the test sealed itself.
type sealedInput struct {
	rowID, keyID string
	generation   int64
	blob         string
}

// FuzzOpen feeds arbitrary (row id, key id, generation, blob) inputs to
// Open. Open must never panic, and may only succeed on a blob this process
// sealed for that exact row, key and generation, returning the original
// plaintext. Each fuzz worker
// builds its own random ring, so inputs sealed by another process simply
// fail to authenticate rather than being mistaken for forgeries.
func FuzzOpen(f *testing.F) {
	ring := newRing(f, "k2")
	known := map[sealedInput][]byte{}
	for _, keyID := range []string{"k1", "k2"} {
		if err := ring.Promote(keyID); err != nil {
			f.Fatal(err)
		}
		for _, rowID := range []string{"row-1", "row-2"} {
			for _, plaintext := range []string{"", "token", canary} {
				s := seal(f, ring, rowID, []byte(plaintext))
				known[sealedInput{rowID, keyID, s.Generation, string(s.Blob)}] = []byte(plaintext)
				addSeeds(f, rowID, keyID, s.Generation, s.Blob)
			}
		}
	}
	f.Fuzz(func(t *testing.T, rowID, keyID string, generation int64, blob []byte) {
		got, err := ring.Open(rowID, secrets.Sealed{KeyID: keyID, Generation: generation, Blob: blob})
		if err != nil {
			if rowID != "" && !errors.Is(err, secrets.ErrDecrypt) && !errors.Is(err, secrets.ErrUnknownKey) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		want, ok := known[sealedInput{rowID, keyID, generation, string(blob)}]
		if !ok {
			t.Fatalf("opened a blob this test never sealed for row %q key %q generation %d", rowID, keyID, generation)
		}
		if !bytes.Equal(got, want) {
			t.Fatal("opened a sealed blob to a different plaintext")
		}
	})
}

// addSeeds adds the valid blob and near misses of it, so the fuzzer starts
// from inputs that reach every check in Open.
func addSeeds(f *testing.F, rowID, keyID string, gen int64, blob []byte) {
	flipped := bytes.Clone(blob)
	flipped[len(flipped)/2] ^= 0x80
	legacy := bytes.Clone(blob)
	legacy[0] = 1
	f.Add(rowID, keyID, gen, blob)
	f.Add(rowID, keyID, gen+1, blob)
	f.Add(rowID, keyID, int64(0), blob)
	f.Add(rowID, keyID, int64(0), legacy)
	f.Add(rowID, keyID, gen, blob[:len(blob)-1])
	f.Add(rowID, keyID, gen, blob[:61])
	f.Add(rowID, keyID, gen, append(bytes.Clone(blob), 0))
	f.Add(rowID, keyID, gen, flipped)
	f.Add(rowID+"x", keyID, gen, blob)
	f.Add(rowID, "k9", gen, blob)
	f.Add("", keyID, gen, blob)
}

// FuzzSealOpen checks that any plaintext up to the limit round-trips for
// any row id, and that the result is bound to that row.
func FuzzSealOpen(f *testing.F) {
	ring := newRing(f)
	f.Add("row-1", []byte("token"))
	f.Add("", []byte{})
	f.Add("ab", []byte(canary))
	f.Add("\x00", bytes.Repeat([]byte{0xff}, 4096))
	f.Fuzz(func(t *testing.T, rowID string, plaintext []byte) {
		s, err := ring.Seal(rowID, 1, plaintext)
		if rowID == "" || len(plaintext) > 1<<20 {
			if err == nil {
				t.Fatal("Seal accepted an empty row id or an oversized plaintext")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if s.KeyID != "k1" || len(s.Blob) != overhead+len(plaintext) {
			t.Fatalf("sealed with key %q into %d bytes", s.KeyID, len(s.Blob))
		}
		got, err := ring.Open(rowID, s)
		if err != nil || !bytes.Equal(got, plaintext) {
			t.Fatalf("round trip failed: %v", err)
		}
		if _, err := ring.Open(rowID+"\x00", s); !errors.Is(err, secrets.ErrDecrypt) {
			t.Fatalf("opened for another row: %v", err)
		}
		rolled := s
		rolled.Generation = 2
		if _, err := ring.Open(rowID, rolled); !errors.Is(err, secrets.ErrDecrypt) {
			t.Fatalf("opened at another generation: %v", err)
		}
	})
}

func BenchmarkSealOpen(b *testing.B) {
	ring := newRing(b)
	for _, size := range []int{256, 4 << 10, 64 << 10} {
		plaintext := bytes.Repeat([]byte{'x'}, size)
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				s, err := ring.Seal("row-1", 1, plaintext)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ring.Open("row-1", s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
