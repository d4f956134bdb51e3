// Package secrets owns the key ring and the envelope encryption of the
// Kubernetes credentials the gateway stores in Postgres, and must never log
// nor put key or plaintext bytes into an error.
//
// Each value is sealed with AES-256-GCM under its own random data key (DEK),
// and only that DEK is sealed under a key-encryption key (KEK) from the key
// ring: the long-lived KEKs never process credential bytes, and since every
// DEK seals exactly one value its nonce can never repeat. The key id travels
// beside the blob (its own column) so operators can count the rows still
// using a key, and re-seal them with Open then Seal, before removing it.
//
// Both AEAD operations authenticate the row id, the key id and the row's
// credential generation, so a sealed value only opens for the row, key and
// seal it was made for: copying it to another row, relabelling it with
// another key id of the ring, or putting an old blob back into a row that
// was re-sealed since (without also putting back the old generation) makes
// Open fail exactly like tampering does, with the single generic ErrDecrypt,
// so callers and attackers learn nothing about which check failed. (Whoever
// can rewrite both columns can restore an old state; the registry also
// refuses generations older than it has seen, for as long as it runs.)
//
// It also owns how files that hold secrets (the key ring, the static token
// file, a saved login) are read and written: mode 0600 or stricter, bounded
// in size, replaced atomically.
//
// The package composes only the standard library's AES-GCM; it implements
// no cryptographic primitive of its own.
package secrets
