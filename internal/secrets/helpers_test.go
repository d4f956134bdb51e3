package secrets_test

import (
	"testing"

	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// canary is used as plaintext wherever a test checks that errors never echo
// what was sealed.
const canary = "CANARY-kubeconfig-token-5f0c1e7a9b"

// newRing returns a ring whose primary is a random key k1, plus a random key
// per extra id.
func newRing(tb testing.TB, others ...string) *secrets.KeyRing {
	tb.Helper()
	ring, err := secrets.NewKeyRing("k1")
	if err != nil {
		tb.Fatal(err)
	}
	for _, id := range others {
		if err := ring.Add(id); err != nil {
			tb.Fatal(err)
		}
	}
	return ring
}

// seal seals plaintext for rowID at generation 1.
func seal(tb testing.TB, ring *secrets.KeyRing, rowID string, plaintext []byte) secrets.Sealed {
	tb.Helper()
	s, err := ring.Seal(rowID, 1, plaintext)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
