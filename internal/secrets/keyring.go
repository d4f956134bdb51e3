package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// keySize is the length of every key, KEK and DEK alike: AES-256.
const keySize = 32

// ErrUnknownKey reports a key id that is not in the ring. It is wrapped with
// the id, which is not secret (it is stored in its own column), so an
// operator can tell which key must be restored to the ring.
var ErrUnknownKey = errors.New("secrets: unknown key id")

// idPattern keeps ids short, lower case and free of characters that would
// need quoting in file names, SQL or metrics labels.
const idPattern = `^[a-z0-9][a-z0-9._-]{0,62}$`

var validID = regexp.MustCompile(idPattern)

// KeyRing holds the key-encryption keys by id and names the primary one, the
// only key used to seal. Older keys stay in the ring so rows sealed before a
// rotation still open. A KeyRing is safe for concurrent use; get one from
// NewKeyRing, ParseKeyRing or LoadKeyRing, as the zero value holds no keys.
type KeyRing struct {
	mu      sync.RWMutex
	primary string
	keys    map[string]kek
}

// kek keeps the raw key only so the ring can be written back to its file;
// the AEAD is built once so sealing does not redo the AES key schedule.
type kek struct {
	raw  []byte
	aead cipher.AEAD
}

// NewKeyRing returns a ring holding one freshly generated key, primaryID,
// which becomes the primary. It is how a new key ring file is bootstrapped.
func NewKeyRing(primaryID string) (*KeyRing, error) {
	k := &KeyRing{keys: map[string]kek{}}
	if err := k.Add(primaryID); err != nil {
		return nil, err
	}
	k.primary = primaryID
	return k, nil
}

// Primary returns the id of the key new values are sealed with.
func (k *KeyRing) Primary() string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.primary
}

// IDs returns the ids of all keys in the ring, sorted so listings and files
// are stable.
func (k *KeyRing) IDs() []string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return slices.Sorted(maps.Keys(k.keys))
}

// Add generates a new random key under id. The new key is not primary until
// promoted, so it can first be distributed to every replica that must open
// values sealed with it.
func (k *KeyRing) Add(id string) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	raw := make([]byte, keySize)
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("secrets: generating key %q: %w", id, err)
	}
	key, err := newKEK(raw)
	if err != nil {
		return fmt.Errorf("secrets: key %q: %w", id, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.keys[id]; ok {
		return fmt.Errorf("secrets: key %q already exists", id)
	}
	k.keys[id] = key
	return nil
}

// Promote makes an existing key the primary, so new seals use it while rows
// sealed with the previous primary keep opening.
func (k *KeyRing) Promote(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.keys[id]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownKey, id)
	}
	k.primary = id
	return nil
}

// Remove drops a key from the ring. It refuses the primary, because the ring
// would then have nothing to seal with; rows still sealed with a removed key
// can no longer be opened, so count them first.
func (k *KeyRing) Remove(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.keys[id]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownKey, id)
	}
	if id == k.primary {
		return fmt.Errorf("secrets: key %q is the primary; promote another key before removing it", id)
	}
	clear(key.raw)
	delete(k.keys, id)
	return nil
}

// Format prints only the ids, whatever the verb: without it fmt would print
// the struct fields, key bytes included, if a ring ever reached a log line.
func (k *KeyRing) Format(f fmt.State, _ rune) {
	_, _ = io.WriteString(f, k.describe())
}

// LogValue keeps structured loggers from printing the ring's fields, key
// material included.
func (k *KeyRing) LogValue() slog.Value {
	return slog.StringValue(k.describe())
}

func (k *KeyRing) describe() string {
	return fmt.Sprintf("secrets.KeyRing{primary: %s, keys: [%s]}", k.Primary(), strings.Join(k.IDs(), " "))
}

// checkID names the expected shape, which is safe: ids are not secret.
func checkID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("key id %q is invalid: it must match %s", id, idPattern)
	}
	return nil
}

func newKEK(raw []byte) (kek, error) {
	aead, err := newAEAD(raw)
	if err != nil {
		return kek{}, err
	}
	return kek{raw: raw, aead: aead}, nil
}

// newAEAD uses the standard library's random-nonce GCM, which prepends its
// own 12-byte nonce, so this package never handles nonces itself.
func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCMWithRandomNonce(block)
}
