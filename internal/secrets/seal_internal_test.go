package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"testing"
)

// The layout constants are written out by hand in seal.go; this pins them to
// what the standard library actually produces.
func TestAEADOverheadMatchesLayout(t *testing.T) {
	block, err := aes.NewCipher(make([]byte, keySize))
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		t.Fatal(err)
	}
	if got := aead.Overhead(); got != aeadOverhead {
		t.Fatalf("AEAD overhead is %d, layout assumes %d", got, aeadOverhead)
	}
	if minBlobSize != 89 {
		t.Fatalf("minBlobSize = %d, the documented layout gives 89", minBlobSize)
	}
}

func TestAdditionalDataIsUnambiguous(t *testing.T) {
	v2 := func(purpose, row, key string, gen int64) []byte {
		return binding{rowID: row, keyID: key, generation: gen, version: formatVersion}.additionalData(purpose)
	}
	tests := []struct {
		name string
		a, b []byte
	}{
		{"row/key boundary", v2(purposeData, "ab", "c", 1), v2(purposeData, "a", "bc", 1)},
		{"purpose/row boundary", v2("data", "x", "k1", 1), v2("dat", "ax", "k1", 1)},
		{"purpose", v2(purposeData, "row", "k1", 1), v2(purposeDEK, "row", "k1", 1)},
		{"empty fields", v2(purposeData, "", "k1", 1), v2(purposeData, "k1", "", 1)},
		{"generation", v2(purposeData, "row", "k1", 1), v2(purposeData, "row", "k1", 2)},
		{"key/generation boundary", v2(purposeData, "row", "k1", 23), v2(purposeData, "row", "k12", 3)},
		{"format", v2(purposeData, "row", "k1", 0),
			binding{rowID: "row", keyID: "k1", version: legacyFormat}.additionalData(purposeData)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if bytes.Equal(tt.a, tt.b) {
				t.Fatal("two bindings encode to the same additional data")
			}
		})
	}
}

// A format 1 blob (sealed before generations existed) opens only for a row
// that holds generation 0; a format 2 blob never does. So neither can stand
// in for the other, and a legacy blob restored into a re-sealed row fails.
func TestLegacyBlobsOpenOnlyWithoutGeneration(t *testing.T) {
	ring, err := NewKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	keyID, key := ring.primaryKey()
	legacy, err := key.seal(binding{rowID: "row", keyID: keyID, version: legacyFormat}, []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ring.Open("row", legacy); err != nil || string(got) != "old" {
		t.Fatalf("legacy blob at generation 0: %q, %v", got, err)
	}
	for _, gen := range []int64{1, 7} {
		moved := legacy
		moved.Generation = gen
		if _, err := ring.Open("row", moved); !errors.Is(err, ErrDecrypt) {
			t.Fatalf("legacy blob opened at generation %d: %v", gen, err)
		}
	}
	current, err := ring.Seal("row", 3, []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	current.Generation = 0
	if _, err := ring.Open("row", current); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("format 2 blob opened at generation 0: %v", err)
	}
}
