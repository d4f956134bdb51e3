package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
)

// maxFileSize bounds what LoadKeyRing reads: a ring of a thousand keys is
// about 60 KiB, so anything larger is not a key ring.
const maxFileSize = 1 << 20

// ringFile is the key ring file format:
//
//	{"primary": "<id>", "keys": {"<id>": "<standard base64 of 32 bytes>"}}
type ringFile struct {
	Primary string            `json:"primary"`
	Keys    map[string]string `json:"keys"`
}

// LoadKeyRing reads and validates the key ring file at path. It refuses a
// file that group or others can access, because anyone who can read it can
// decrypt every stored credential.
func LoadKeyRing(path string) (*KeyRing, error) {
	data, err := ReadPrivateFile(path, maxFileSize)
	if err != nil {
		return nil, fmt.Errorf("key ring: %w", err)
	}
	defer clear(data)
	ring, err := parseRing(data)
	if err != nil {
		return nil, fmt.Errorf("key ring %s: %w", path, err)
	}
	return ring, nil
}

// ParseKeyRing validates a key ring file's content. Its errors name the
// faulty field or key id but never include key material or the offending
// input, because they end up in logs.
func ParseKeyRing(data []byte) (*KeyRing, error) {
	ring, err := parseRing(data)
	if err != nil {
		return nil, fmt.Errorf("key ring: %w", err)
	}
	return ring, nil
}

// encodeFile returns the key ring file format, key material included. It is
// unexported so no json.Marshal of a ring can leak keys; WriteFile is the only
// way out, and Format and LogValue keep the ring out of logs.
func (k *KeyRing) encodeFile() ([]byte, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	f := ringFile{Primary: k.primary, Keys: make(map[string]string, len(k.keys))}
	for id, key := range k.keys {
		f.Keys[id] = base64.StdEncoding.EncodeToString(key.raw)
	}
	return json.MarshalIndent(f, "", "  ")
}

// WriteFile writes the ring to path with mode 0600. It writes a temporary
// file in the same directory, syncs it and renames it over path, so a crash
// leaves either the old ring or the new one, never a truncated file that
// would lock the gateway out of every stored credential.
func (k *KeyRing) WriteFile(path string) error {
	data, err := k.encodeFile()
	if err != nil {
		return fmt.Errorf("key ring: %w", err)
	}
	defer clear(data)
	if err := WritePrivateFile(path, append(data, '\n')); err != nil {
		return fmt.Errorf("key ring: %w", err)
	}
	return nil
}

func parseRing(data []byte) (*KeyRing, error) {
	f, err := decodeRingFile(data)
	if err != nil {
		return nil, err
	}
	if f.Primary == "" {
		return nil, errors.New("primary is missing")
	}
	if len(f.Keys) == 0 {
		return nil, errors.New("keys must not be empty")
	}
	ring := &KeyRing{primary: f.Primary, keys: make(map[string]kek, len(f.Keys))}
	for _, id := range slices.Sorted(maps.Keys(f.Keys)) {
		key, err := decodeKey(id, f.Keys[id])
		if err != nil {
			return nil, err
		}
		ring.keys[id] = key
	}
	if _, ok := ring.keys[f.Primary]; !ok {
		return nil, fmt.Errorf("primary %q is not in keys", f.Primary)
	}
	return ring, nil
}

// decodeKey's errors say what is wrong with the value, never what it is.
func decodeKey(id, encoded string) (kek, error) {
	if err := checkID(id); err != nil {
		return kek{}, err
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(encoded)
	if err != nil {
		return kek{}, fmt.Errorf("key %q is not valid standard base64", id)
	}
	if len(raw) != keySize {
		clear(raw)
		return kek{}, fmt.Errorf("key %q must be exactly %d bytes after base64 decoding (got %d)", id, keySize, len(raw))
	}
	return newKEK(raw)
}

// decodeRingFile walks the JSON tokens itself instead of using
// json.Unmarshal, because encoding/json silently keeps the last of duplicate
// names (an ambiguous key id must be an error, not a guess) and its error
// messages can quote input characters, which here may be key material.
func decodeRingFile(data []byte) (ringFile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var f ringFile
	err := decodeObject(dec, "the file", func(name string) error {
		switch name {
		case "primary":
			return decodeString(dec, "primary", &f.Primary)
		case "keys":
			f.Keys = map[string]string{}
			return decodeKeys(dec, f.Keys)
		default:
			return fmt.Errorf("unknown field %q", name)
		}
	})
	if err != nil {
		return ringFile{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ringFile{}, errors.New("unexpected data after the JSON object")
	}
	return f, nil
}

func decodeKeys(dec *json.Decoder, keys map[string]string) error {
	return decodeObject(dec, "keys", func(id string) error {
		var encoded string
		if err := decodeString(dec, fmt.Sprintf("key %q", id), &encoded); err != nil {
			return err
		}
		keys[id] = encoded
		return nil
	})
}

// decodeObject reads one JSON object, calling member for each name so it can
// read the value, and rejects a name that appears twice.
func decodeObject(dec *json.Decoder, what string, member func(name string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return jsonError(err)
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("%s must be a JSON object", what)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return jsonError(err)
		}
		name, _ := tok.(string) // the decoder only yields strings as object names
		if seen[name] {
			return fmt.Errorf("%q appears more than once in %s", name, what)
		}
		seen[name] = true
		if err := member(name); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing brace, or the error that stopped More
	return jsonError(err)
}

func decodeString(dec *json.Decoder, what string, dst *string) error {
	tok, err := dec.Token()
	if err != nil {
		return jsonError(err)
	}
	s, ok := tok.(string)
	if !ok {
		return fmt.Errorf("%s must be a JSON string", what)
	}
	*dst = s
	return nil
}

// jsonError keeps only the position of a syntax error: encoding/json's
// messages can quote the offending character.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &syntax):
		return fmt.Errorf("not valid JSON (syntax error at byte offset %d)", syntax.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("not valid JSON (unexpected end of input)")
	default:
		return errors.New("not valid JSON")
	}
}
