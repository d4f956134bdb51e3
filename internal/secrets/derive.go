package secrets

import (
	"crypto/hkdf"
	"crypto/sha256"
)

// DeriveKeys returns a 32-byte key for purpose derived from each key of the
// ring (HKDF-SHA256), the primary's first: what replicas sharing the ring
// use to authenticate each other without another secret to distribute. A
// verifier accepts any of them, so a rotation (add everywhere, then
// promote) never refuses a replica that has not reloaded yet. The ring's
// keys themselves never leave it.
func (k *KeyRing) DeriveKeys(purpose string) ([][]byte, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	ids := []string{k.primary}
	for id := range k.keys {
		if id != k.primary {
			ids = append(ids, id)
		}
	}
	out := make([][]byte, 0, len(ids))
	for _, id := range ids {
		key, err := hkdf.Key(sha256.New, k.keys[id].raw, nil, purpose, 32)
		if err != nil {
			return nil, err
		}
		out = append(out, key)
	}
	return out, nil
}
