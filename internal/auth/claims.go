package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Tokens are read strictly before any library sees them. go-jose accepts
// the JWS JSON serialization and base64url whose unused trailing bits are
// set, so one signed token has many spellings (each a new entry in the
// cache of verified tokens); encoding/json, under go-oidc, matches claim
// names without regard to case and lets a later duplicate win, so
// {"iss":"evil","Iss":"<issuer>"} passes the issuer check and "SUB"
// overrides "sub". Here a token must be compact and canonical, and its
// payload must name every claim the gateway reads exactly once and exactly
// so; the claims it uses are then read from that payload, never from a
// library's case-folded view.

// registeredClaims are the claims the gateway (or go-oidc for it) reads.
var registeredClaims = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "azp", "typ", "jti", "preferred_username"}

// maxNumericDate bounds exp, nbf and iat (9999-12-31T23:59:59Z): a larger
// number would overflow a time and land in the past.
const maxNumericDate = 253402300799

// compactParts splits a compact JWS into its three segments and checks that
// each is canonical base64url: the alphabet only, no padding, no stray
// trailing bits (so it decodes and encodes back to itself).
func compactParts(token string) (header, payload []byte, err error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, nil, errors.New("not a compact JWS (three base64url segments joined by dots)")
	}
	var decoded [3][]byte
	for i, part := range parts {
		if part == "" {
			return nil, nil, errors.New("a segment of the token is empty")
		}
		for _, c := range []byte(part) {
			if (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return nil, nil, errors.New("the token is not base64url (RFC 7515 compact serialization)")
			}
		}
		if decoded[i], err = base64.RawURLEncoding.Strict().DecodeString(part); err != nil {
			return nil, nil, errors.New("a segment of the token is not canonical base64url")
		}
	}
	return decoded[0], decoded[1], nil
}

// claimNames says which names the strict reading guards at each level of
// the payload: the registered claims at the top, and every step of the
// configured role and scope claim paths at its own level.
type claimNames map[string][]string

func newClaimNames(paths ...string) claimNames {
	names := claimNames{"": registeredClaims}
	for _, path := range paths {
		if path == "" {
			continue
		}
		parent := ""
		for part := range strings.SplitSeq(path, ".") {
			names[parent] = append(names[parent], part)
			parent = strings.TrimPrefix(parent+"."+part, ".")
		}
	}
	return names
}

// readHeader checks the JOSE header: a JSON object with no duplicate
// member, whose typ, when present, says JWT (Keycloak's access tokens) or
// at+jwt (RFC 9068).
func readHeader(raw []byte) error {
	doc, err := strictObject(raw, claimNames{"": {"alg", "kid", "typ", "crit", "cty"}})
	if err != nil {
		return fmt.Errorf("the token's header: %w", err)
	}
	if typ, ok := doc["typ"]; ok {
		s, _ := typ.(string)
		if !strings.EqualFold(s, "JWT") && !strings.EqualFold(s, "at+jwt") {
			return errors.New("the token's header typ is not JWT or at+jwt: not an access token")
		}
	}
	return nil
}

// strictObject decodes raw, a JSON object, refusing a member that appears
// twice in one object (at any depth) and, in the objects names guards, a
// member that differs from a guarded name only in case. Numbers stay
// json.Number, so a date is read exactly.
func strictObject(raw []byte, names claimNames) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readValue(dec, names, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON object")
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return doc, nil
}

// maxClaimDepth bounds the nesting of a payload.
const maxClaimDepth = 16

func readValue(dec *json.Decoder, names claimNames, path string, depth int) (any, error) {
	if depth > maxClaimDepth {
		return nil, errors.New("nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, errors.New("not valid JSON")
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			keyTok, err := dec.Token()
			if err != nil {
				return nil, errors.New("not valid JSON")
			}
			key := keyTok.(string) // an object's member names are strings
			if _, dup := obj[key]; dup {
				return nil, fmt.Errorf("the member %q appears twice", strings.TrimPrefix(path+"."+key, "."))
			}
			for _, guarded := range names[path] {
				if key != guarded && strings.EqualFold(key, guarded) {
					return nil, fmt.Errorf("the member %q differs from the claim %q only in case", key, guarded)
				}
			}
			if obj[key], err = readValue(dec, names, strings.TrimPrefix(path+"."+key, "."), depth+1); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token()
		return obj, err
	case json.Delim('['):
		list := []any{}
		for dec.More() {
			item, err := readValue(dec, names, path+"[]", depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, item)
		}
		_, err := dec.Token()
		return list, err
	}
	return tok, nil
}

// numericDate reads a date claim: a JSON number of seconds since the epoch
// within [0, year 9999]; present says whether the claim is there at all.
func numericDate(claims map[string]any, name string) (t time.Time, present bool, err error) {
	v, ok := claims[name]
	if !ok {
		return time.Time{}, false, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return time.Time{}, true, fmt.Errorf("the token's %s is not a number", name)
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || f < 0 || f > maxNumericDate {
		return time.Time{}, true, fmt.Errorf("the token's %s is not a date between 1970 and 9999", name)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true, nil
}

// claimAt is the value at a dotted path of claims: present says every step
// is there; shaped says every step but the last is an object.
func claimAt(claims map[string]any, path string) (v any, present, shaped bool) {
	var cur any = claims
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, true, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false, true
		}
	}
	return cur, true, true
}

// stringList is v as a list of strings; ok is false when it is not a list
// or holds anything else.
func stringList(v any) (list []string, ok bool) {
	items, ok := v.([]any)
	if !ok {
		return nil, false
	}
	list = make([]string, 0, len(items))
	for _, item := range items {
		s, ok := item.(string)
		if !ok {
			return nil, false
		}
		list = append(list, s)
	}
	return list, true
}

// scopeClaim reads the environments claim at path: absent when some step
// of the path is missing (the principal is unscoped), otherwise the ids it
// lists; a claim of the wrong shape at any step — a parent that is not an
// object, a list that is not all strings — lists nothing, so a malformed
// claim can only narrow a principal, never widen it.
func scopeClaim(claims map[string]any, path string) (ids []string, present bool) {
	v, present, shaped := claimAt(claims, path)
	if !present {
		return nil, false
	}
	list, ok := stringList(v)
	ids = []string{}
	if !shaped || !ok {
		return ids, true
	}
	for _, id := range list {
		if resourceIDMatch.MatchString(id) {
			ids = append(ids, id)
		}
	}
	return ids, true
}

// roleNames are the strings at a role claim's path; anything else grants
// nothing.
func roleNames(claims map[string]any, path string) []string {
	v, _, _ := claimAt(claims, path)
	items, _ := v.([]any)
	var out []string
	for _, item := range items {
		if s, ok := item.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
