package auth

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// tokenPrefix marks the gateway's static tokens, so secret scanners and
// people recognise one that leaked.
const tokenPrefix = "sgw_"

// maxTokenFileSize bounds the token file: ten thousand tokens fit easily.
const maxTokenFileSize = 4 << 20

// StaticToken is one entry of the token file: the SHA-256 of a token, never
// the token itself, and who presenting it is.
type StaticToken struct {
	// ID names the entry for `tokens list` and `tokens revoke`.
	ID     string `json:"id"`
	SHA256 string `json:"sha256"`
	// Subject is who the token stands for (audit records name it).
	Subject string `json:"subject"`
	Roles   []Role `json:"roles"`
	// Environments, when present, limits the token to these environments.
	Environments []string  `json:"environments,omitempty"`
	CreateTime   time.Time `json:"create_time"`
}

// TokenFile is the static token file: {"tokens": [StaticToken, ...]}.
type TokenFile struct {
	Tokens []StaticToken `json:"tokens"`
}

var (
	tokenIDPattern  = regexp.MustCompile(`^[a-z0-9]{8,32}$`)
	sha256Pattern   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	subjectPattern  = regexp.MustCompile(`^[\p{L}\p{N}@._:/+-]{1,256}$`)
	resourceIDMatch = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// ReadTokenFile reads and validates the token file at path (mode 0600 or
// stricter). Errors name the entry and field, never a hash.
func ReadTokenFile(path string) (TokenFile, error) {
	data, err := secrets.ReadPrivateFile(path, maxTokenFileSize)
	if err != nil {
		return TokenFile{}, fmt.Errorf("token file: %w", err)
	}
	var f TokenFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return TokenFile{}, fmt.Errorf("token file %s: not a token file (%s)", path, describeJSONError(err))
	}
	if err := f.validate(); err != nil {
		return TokenFile{}, fmt.Errorf("token file %s: %w", path, err)
	}
	return f, nil
}

// describeJSONError keeps decoder errors to their kind: a syntax error's
// message may quote the file's content.
func describeJSONError(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("syntax error at byte offset %d", syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s has the wrong type", typ.Field)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return err.Error()
	}
	return "invalid JSON"
}

func (f TokenFile) validate() error {
	seen := map[string]bool{}
	for i, t := range f.Tokens {
		where := fmt.Sprintf("tokens[%d]", i)
		switch {
		case !tokenIDPattern.MatchString(t.ID):
			return fmt.Errorf("%s.id: must be 8 to 32 lowercase letters or digits", where)
		case seen[t.ID]:
			return fmt.Errorf("%s.id: %s is used twice", where, t.ID)
		case !sha256Pattern.MatchString(t.SHA256):
			return fmt.Errorf("%s.sha256: must be 64 lowercase hex digits", where)
		case seen[t.SHA256]:
			// One token, two entries: which roles it has would depend on
			// the order, and revoking one entry would leave it valid.
			return fmt.Errorf("%s.sha256: the same token is listed twice", where)
		case !subjectPattern.MatchString(t.Subject):
			return fmt.Errorf("%s.subject: must be 1 to 256 letters, digits or @._:/+-", where)
		case len(t.Roles) == 0:
			return fmt.Errorf("%s.roles: at least one role is required", where)
		case t.Environments != nil && len(t.Environments) == 0:
			return fmt.Errorf("%s.environments: leave it out for every environment, or list at least one", where)
		}
		seen[t.ID], seen[t.SHA256] = true, true
		for j, r := range t.Roles {
			if _, ok := ParseRole(string(r)); !ok {
				return fmt.Errorf("%s.roles[%d]: must be one of admin, dcm, viewer", where, j)
			}
		}
		for j, env := range t.Environments {
			if !resourceIDMatch.MatchString(env) {
				return fmt.Errorf("%s.environments[%d]: not an environment id", where, j)
			}
		}
	}
	return nil
}

// Write replaces the token file at path atomically, mode 0600.
func (f TokenFile) Write(path string) error {
	if f.Tokens == nil {
		f.Tokens = []StaticToken{}
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := secrets.WritePrivateFile(path, append(data, '\n')); err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	return nil
}

// Add creates a token for subject with roles (and, if environments is not
// nil, that scope), appends its hash and returns the token itself: the only
// time it exists outside the caller's hands.
func (f *TokenFile) Add(subject string, roles []Role, environments []string, now time.Time) (string, StaticToken, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", StaticToken{}, err
	}
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		return "", StaticToken{}, err
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(secret)
	entry := StaticToken{
		ID: hex.EncodeToString(id), SHA256: hashToken(token), Subject: subject,
		Roles: slices.Clone(roles), Environments: slices.Clone(environments), CreateTime: now.UTC().Truncate(time.Second),
	}
	next := TokenFile{Tokens: append(slices.Clone(f.Tokens), entry)}
	if err := next.validate(); err != nil {
		return "", StaticToken{}, err
	}
	*f = next
	return token, entry, nil
}

// Revoke removes the entry with the given id and reports whether it existed.
func (f *TokenFile) Revoke(id string) bool {
	n := len(f.Tokens)
	f.Tokens = slices.DeleteFunc(f.Tokens, func(t StaticToken) bool { return t.ID == id })
	return len(f.Tokens) < n
}

func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// StaticTokens verifies bearer tokens against the token file. Reload (on
// SIGHUP) swaps the whole set at once.
type StaticTokens struct {
	path    string
	entries atomic.Pointer[[]staticEntry]
}

type staticEntry struct {
	sum       [sha256.Size]byte
	principal Principal
}

// NewStaticTokens reads the token file at path.
func NewStaticTokens(path string) (*StaticTokens, error) {
	s := &StaticTokens{path: path}
	return s, s.Reload()
}

// Reload re-reads the token file; on error the current set stays.
func (s *StaticTokens) Reload() error {
	f, err := ReadTokenFile(s.path)
	if err != nil {
		return err
	}
	entries := make([]staticEntry, len(f.Tokens))
	for i, t := range f.Tokens {
		raw, _ := hex.DecodeString(t.SHA256) // validated
		copy(entries[i].sum[:], raw)
		entries[i].principal = Principal{Subject: t.Subject, Name: t.Subject, Roles: slices.Clone(t.Roles),
			Environments: slices.Clone(t.Environments), Method: MethodStatic}
	}
	s.entries.Store(&entries)
	return nil
}

// Count is how many tokens are loaded.
func (s *StaticTokens) Count() int { return len(*s.entries.Load()) }

// Verify finds the token's entry. Every entry is compared, in constant time
// each, so the time taken says nothing about which hash came close.
func (s *StaticTokens) Verify(_ context.Context, token string) (Principal, error) {
	sum := sha256.Sum256([]byte(token))
	found := -1
	entries := *s.entries.Load()
	for i := range entries {
		if subtle.ConstantTimeCompare(sum[:], entries[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, errUnknownToken
	}
	return entries[found].principal, nil
}

var errUnknownToken = errors.New("the token is not in the token file")
