package auth

import (
	"crypto/sha256"
	"sync"
	"time"
)

// Cache of verified tokens. DCM, dashboards and the CLI present the same
// token for its whole lifetime; verifying its RS256 signature and claims
// again for every request costs tens of microseconds and allocations, so a
// verified token's principal is kept for verifiedTTL (never past the
// token's own expiry). The TTL bounds how long a key the issuer withdrew
// still admits tokens it signed; a reload (SIGHUP) clears the cache. Tokens are keyed by their SHA-256, so the
// cache holds no token.
const (
	verifiedTTL        = time.Minute
	maxVerifiedEntries = 10000
)

type verifiedTokens struct {
	mu      sync.RWMutex
	entries map[[sha256.Size]byte]verifiedToken
}

type verifiedToken struct {
	principal Principal
	until     time.Time
}

func (c *verifiedTokens) get(sum [sha256.Size]byte, now time.Time) (Principal, bool) {
	c.mu.RLock()
	e, ok := c.entries[sum]
	c.mu.RUnlock()
	if !ok || !now.Before(e.until) {
		return Principal{}, false
	}
	return e.principal, true
}

// put keeps p until until. A full cache drops its expired entries and, if
// that frees less than a tenth of it, random others until a tenth is free
// (map order is random): a flood of distinct valid tokens costs
// verifications and one sweep per tenth, never unbounded memory.
func (c *verifiedTokens) put(sum [sha256.Size]byte, p Principal, until, now time.Time) {
	if !now.Before(until) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxVerifiedEntries {
		for k, e := range c.entries {
			if !now.Before(e.until) || len(c.entries) > maxVerifiedEntries*9/10 {
				delete(c.entries, k)
			}
		}
	}
	c.entries[sum] = verifiedToken{principal: p, until: until}
}

// clear forgets every verified token.
func (c *verifiedTokens) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
}
