package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"golang.org/x/sync/singleflight"
)

// Key set timing. go-oidc's RemoteKeySet fetches the issuer's JWKS again for
// every token whose key id it does not know, so a flood of tokens with random
// `kid`s turns into a flood of requests to the identity provider. This key
// set fetches for an unknown key id at most once per keyRefetchCooldown; a
// key the issuer really rotated in is accepted on first sight once the
// cooldown since the last fetch has passed. Known keys are re-read after
// keyMaxAge, so a key the issuer withdrew stops verifying within keyMaxAge
// plus verifiedTTL (six minutes), or at once on a reload (SIGHUP).
const (
	keyRefetchCooldown = 30 * time.Second
	keyMaxAge          = 5 * time.Minute
	keyFetchTimeout    = 10 * time.Second
	// maxJWKSSize bounds what is read from the issuer.
	maxJWKSSize = 1 << 20
)

var (
	errUnknownKey = errors.New("the token is signed with a key the issuer does not publish")
	errBadKey     = errors.New("the token's signature does not verify")
)

// keySet is an oidc.KeySet over the issuer's JWKS URL with a cooldown on
// fetches caused by unknown key ids. Concurrent requests that need a fetch
// share one.
type keySet struct {
	url      string
	client   *http.Client
	algs     []jose.SignatureAlgorithm
	cooldown time.Duration
	now      func() time.Time

	fetches singleflight.Group

	mu       sync.Mutex
	keys     []jose.JSONWebKey
	keysTime time.Time // when keys were fetched
	fetched  time.Time // when the last fetch started
	fetchErr error     // of the last fetch
}

// VerifySignature implements oidc.KeySet: it checks the token's one
// signature against the issuer's key with the token's key id, and returns
// the payload. go-oidc has already refused algorithms outside the allowed
// list; they are refused here again so this type is safe on its own.
func (k *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSigned(jwt, k.algs)
	if err != nil {
		return nil, fmt.Errorf("malformed token: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("a token must carry exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID

	keys, fresh := k.cached()
	if payload, _, err := verifyWith(jws, keys, kid); err == nil && fresh {
		return payload, nil
	}
	// An unknown key id, a key that does not verify (the issuer may have
	// rotated it under the same id), or known keys due for a re-read: look
	// again, as the cooldown allows.
	keys, err = k.refresh(ctx)
	if err != nil && len(keys) == 0 {
		return nil, err
	}
	payload, known, err := verifyWith(jws, keys, kid)
	if !known {
		return nil, errUnknownKey
	}
	return payload, err
}

// unavailable reports whether the key set cannot verify anything: its last
// fetch failed and it holds no keys from an earlier one.
func (k *keySet) unavailable() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fetchErr != nil && len(k.keys) == 0
}

// verifyWith verifies jws with the key named kid (or, without a kid, with
// any key that verifies it). known reports whether such a key exists.
func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) (payload []byte, known bool, err error) {
	alg := jws.Signatures[0].Header.Algorithm
	for i := range keys {
		key := &keys[i]
		if kid != "" && key.KeyID != kid || key.Algorithm != "" && key.Algorithm != alg {
			continue
		}
		known = true
		if payload, err := jws.Verify(key); err == nil {
			return payload, true, nil
		}
	}
	return nil, known, errBadKey
}

func (k *keySet) cached() (keys []jose.JSONWebKey, fresh bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys, !k.keysTime.IsZero() && k.now().Sub(k.keysTime) < keyMaxAge
}

// refresh fetches the key set unless one was fetched within the cooldown;
// concurrent callers share one fetch (which does not end with the context
// of the caller that started it). It returns the keys it has either way.
func (k *keySet) refresh(ctx context.Context) ([]jose.JSONWebKey, error) {
	return k.fetchShared(ctx, false)
}

// reload fetches the key set now, whatever the cooldown (an operator's
// SIGHUP after the issuer withdrew a key); the cooldown for unknown key ids
// then runs from this fetch. A failed fetch keeps the keys held.
func (k *keySet) reload(ctx context.Context) error {
	_, err := k.fetchShared(ctx, true)
	return err
}

func (k *keySet) fetchShared(ctx context.Context, now bool) ([]jose.JSONWebKey, error) {
	key := "jwks"
	if now {
		key = "jwks-reload" // never answered by a fetch that started before the reload
	}
	result := k.fetches.DoChan(key, func() (any, error) {
		k.mu.Lock()
		if !now && !k.fetched.IsZero() && k.now().Sub(k.fetched) < k.cooldown {
			defer k.mu.Unlock()
			return k.keys, nil
		}
		k.fetched = k.now()
		k.mu.Unlock()

		fetchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyFetchTimeout)
		defer cancel()
		keys, err := k.fetch(fetchCtx)

		k.mu.Lock()
		defer k.mu.Unlock()
		if err == nil {
			k.keys, k.keysTime = keys, k.now()
		}
		k.fetchErr = err
		return k.keys, err
	})
	select {
	case r := <-result:
		keys, _ := r.Val.([]jose.JSONWebKey)
		return keys, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetch reads the JWKS document and keeps the public signature keys in it;
// keys of types go-jose does not know are skipped, as RFC 7517 §5 asks.
func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the issuer's keys: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch the issuer's keys: HTTP status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSSize+1))
	if err != nil {
		return nil, fmt.Errorf("fetch the issuer's keys: %w", err)
	}
	if len(body) > maxJWKSSize {
		return nil, errors.New("fetch the issuer's keys: the key set is larger than 1 MiB")
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, errors.New("fetch the issuer's keys: not a JWKS document")
	}
	var keys []jose.JSONWebKey
	for _, raw := range doc.Keys {
		var key jose.JSONWebKey
		if json.Unmarshal(raw, &key) != nil || !key.Valid() || !key.IsPublic() || key.Use != "" && key.Use != "sig" {
			continue
		}
		keys = append(keys, key)
	}
	return keys, nil
}
