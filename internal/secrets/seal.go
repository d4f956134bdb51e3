package secrets

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// A blob is laid out as follows (n is the plaintext length):
//
//	offset  length  content
//	0       1       format version: formatVersion, or legacyFormat (read only)
//	1       12      nonce of the DEK wrapping
//	13      32      DEK encrypted with AES-256-GCM under the KEK named by Sealed.KeyID
//	45      16      GCM tag of the DEK wrapping
//	61      12      nonce of the data encryption
//	73      n       plaintext encrypted with AES-256-GCM under the DEK
//	73+n    16      GCM tag of the data encryption
//
// Both encryptions authenticate additionalData, which differs only in its
// purpose label, so neither section can stand in for the other. Format 2
// binds the row's credential generation too; format 1 blobs (no generation)
// are still opened, for generation 0 only, until they are re-sealed.
const (
	formatVersion byte = 2
	legacyFormat  byte = 1
	// aeadOverhead is what cipher.NewGCMWithRandomNonce adds: nonce and tag.
	aeadOverhead     = 12 + 16
	wrappedDEKSize   = keySize + aeadOverhead
	minBlobSize      = 1 + wrappedDEKSize + aeadOverhead
	maxPlaintextSize = 1 << 20
	maxBlobSize      = minBlobSize + maxPlaintextSize
)

// adLabel names what the additional data is for, so these ciphertexts can
// never be valid in another protocol that happens to share a key.
const (
	adLabel     = "dcm-project/storage-gateway/secrets"
	purposeDEK  = "wrapped-dek"
	purposeData = "data"
)

// ErrDecrypt is the only error Open returns for a blob that does not
// authenticate, whatever the cause (tampering, truncation, another row's
// value, a relabelled key id), so a failure reveals nothing that could guide
// an attacker.
var ErrDecrypt = errors.New("secrets: sealed value failed authentication")

// errEmptyRowID refuses sealing without a row to bind to: such a value could
// be copied to any row that also lacks an id.
var errEmptyRowID = errors.New("secrets: row id must not be empty")

// errNoGeneration refuses sealing without a generation: a format 2 blob is
// always bound to one.
var errNoGeneration = errors.New("secrets: generation must be positive")

// Sealed is what gets stored: the key id in its own column, so the rows
// still using a key can be counted before the key is removed; the
// generation in its own column, so the row says which seal it holds; and one
// opaque blob.
type Sealed struct {
	KeyID string
	// Generation is never reused for a row: each seal of a row's value gets
	// a new one (the caller draws it from a database sequence). Binding it
	// into the authenticated data means a blob saved before a credential
	// rotation, or from an earlier row of the same id, does not open once the
	// row holds a newer generation. 0 marks a legacy (format 1) blob.
	Generation int64
	Blob       []byte
}

// Seal encrypts plaintext for generation generation of the row rowID under
// the primary key, with a fresh random DEK and fresh nonces, so sealing the
// same value twice gives unrelated blobs. Each seal spends one random nonce
// of the primary KEK, whose collision risk stays negligible below 2^32
// seals: rotate long before that. Plaintexts over 1 MiB are refused: credentials are far
// smaller, and the bound keeps Open's input bounded too.
func (k *KeyRing) Seal(rowID string, generation int64, plaintext []byte) (Sealed, error) {
	if rowID == "" {
		return Sealed{}, errEmptyRowID
	}
	if generation <= 0 {
		return Sealed{}, errNoGeneration
	}
	if len(plaintext) > maxPlaintextSize {
		return Sealed{}, fmt.Errorf("secrets: plaintext of %d bytes exceeds the limit of %d bytes", len(plaintext), maxPlaintextSize)
	}
	keyID, key := k.primaryKey()
	return key.seal(binding{rowID: rowID, keyID: keyID, generation: generation, version: formatVersion}, plaintext)
}

// seal writes a blob of format bound.version bound as given.
func (key kek) seal(bound binding, plaintext []byte) (Sealed, error) {
	dek := make([]byte, keySize)
	defer clear(dek)
	if _, err := rand.Read(dek); err != nil {
		return Sealed{}, fmt.Errorf("secrets: generating data key: %w", err)
	}
	data, err := newAEAD(dek)
	if err != nil {
		return Sealed{}, fmt.Errorf("secrets: data key: %w", err)
	}
	blob := make([]byte, 1, minBlobSize+len(plaintext))
	blob[0] = bound.version
	// The nil nonces are required: NewGCMWithRandomNonce draws and prepends
	// a fresh random nonce on every Seal.
	blob = key.aead.Seal(blob, nil, dek, bound.additionalData(purposeDEK))    //nolint:gosec // G407: nonce is random, see above
	blob = data.Seal(blob, nil, plaintext, bound.additionalData(purposeData)) //nolint:gosec // G407: nonce is random, see above
	return Sealed{KeyID: bound.keyID, Generation: bound.generation, Blob: blob}, nil
}

// Open decrypts a value sealed for the row rowID at s.Generation. A key id
// missing from the ring gives ErrUnknownKey, which is an operational problem
// (a key removed too early) rather than an attack; every other failure is
// ErrDecrypt.
func (k *KeyRing) Open(rowID string, s Sealed) ([]byte, error) {
	if rowID == "" {
		return nil, errEmptyRowID
	}
	key, ok := k.key(s.KeyID)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKey, s.KeyID)
	}
	version, wrapped, data, ok := splitBlob(s.Blob)
	// A legacy blob carries no generation: it opens only where the row says
	// it holds none, so it cannot stand in for a newer seal.
	if !ok || (version == legacyFormat) != (s.Generation == 0) {
		return nil, ErrDecrypt
	}
	bound := binding{rowID: rowID, keyID: s.KeyID, generation: s.Generation, version: version}
	dek, err := key.aead.Open(nil, nil, wrapped, bound.additionalData(purposeDEK))
	if err != nil {
		return nil, ErrDecrypt
	}
	defer clear(dek)
	return openData(dek, data, bound.additionalData(purposeData))
}

func (k *KeyRing) primaryKey() (string, kek) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.primary, k.keys[k.primary]
}

func (k *KeyRing) key(id string) (kek, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	key, ok := k.keys[id]
	return key, ok
}

// splitBlob checks the version and every length before slicing, so no input
// can make Open panic.
func splitBlob(blob []byte) (version byte, wrapped, data []byte, ok bool) {
	if len(blob) < minBlobSize || len(blob) > maxBlobSize || blob[0] != formatVersion && blob[0] != legacyFormat {
		return 0, nil, nil, false
	}
	return blob[0], blob[1 : 1+wrappedDEKSize], blob[1+wrappedDEKSize:], true
}

func openData(dek, data, ad []byte) ([]byte, error) {
	aead, err := newAEAD(dek)
	if err != nil {
		return nil, ErrDecrypt
	}
	plaintext, err := aead.Open(nil, nil, data, ad)
	if err != nil {
		return nil, ErrDecrypt
	}
	return plaintext, nil
}

// binding is what a blob is bound to besides its purpose.
type binding struct {
	rowID, keyID string
	generation   int64
	version      byte
}

// additionalData binds a section to its purpose, the format version, the
// row, the key id and (format 2) the generation. Each variable field is
// length-prefixed so that no two different bindings encode to the same
// bytes, as ("ab", "c") and ("a", "bc") would if simply concatenated.
func (b binding) additionalData(purpose string) []byte {
	fields := []string{purpose, b.rowID, b.keyID}
	if b.version != legacyFormat {
		fields = append(fields, strconv.FormatInt(b.generation, 10))
	}
	size := len(adLabel) + 1
	for _, f := range fields {
		size += binary.MaxVarintLen64 + len(f)
	}
	ad := make([]byte, 0, size)
	ad = append(ad, adLabel...)
	ad = append(ad, b.version)
	for _, field := range fields {
		ad = binary.AppendUvarint(ad, uint64(len(field)))
		ad = append(ad, field...)
	}
	return ad
}
