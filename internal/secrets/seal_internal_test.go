package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
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
	tests := []struct {
		name string
		a, b [3]string // purpose, row id, key id
	}{
		{"row/key boundary", [3]string{purposeData, "ab", "c"}, [3]string{purposeData, "a", "bc"}},
		{"purpose/row boundary", [3]string{"data", "x", "k1"}, [3]string{"dat", "ax", "k1"}},
		{"purpose", [3]string{purposeData, "row", "k1"}, [3]string{purposeDEK, "row", "k1"}},
		{"empty fields", [3]string{purposeData, "", "k1"}, [3]string{purposeData, "k1", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := additionalData(tt.a[0], tt.a[1], tt.a[2])
			b := additionalData(tt.b[0], tt.b[1], tt.b[2])
			if bytes.Equal(a, b) {
				t.Fatalf("%q and %q encode to the same additional data", tt.a, tt.b)
			}
		})
	}
}
