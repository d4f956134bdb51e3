package environments

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// rewrapBatch bounds how many rows one re-seal transaction locks.
const rewrapBatch = 100

// CheckKeys fails when a stored credential names a key the key ring lacks:
// the gateway refuses to start rather than discover it on first use.
func (s *Service) CheckKeys(ctx context.Context) error {
	return s.checkKeys(ctx, s.keys.Load())
}

// ReplaceKeys swaps in a reloaded key ring after checking that it holds
// every key a stored credential uses; otherwise the current ring stays.
// Seals from then on use the new primary.
func (s *Service) ReplaceKeys(ctx context.Context, ring *secrets.KeyRing) error {
	if err := s.checkKeys(ctx, ring); err != nil {
		return err
	}
	s.keys.Store(ring)
	s.log.InfoContext(ctx, "key ring loaded", "audit", true, "primary", ring.Primary(), "keys", ring.IDs())
	return nil
}

// checkKeys opens one stored credential per key in use: a missing key id, or
// a key with the right id but different bytes, is found before it matters.
func (s *Service) checkKeys(ctx context.Context, ring *secrets.KeyRing) error {
	samples, err := s.repo.keySamples(ctx)
	if err != nil {
		return fmt.Errorf("check credential keys: %w", err)
	}
	var missing, wrong []string
	for _, k := range samples {
		plain, err := ring.Open(k.rowID, k.sealed)
		clear(plain)
		switch {
		case errors.Is(err, secrets.ErrUnknownKey):
			missing = append(missing, fmt.Sprintf("%s (%d environments)", k.sealed.KeyID, k.rows))
		case err != nil:
			wrong = append(wrong, k.sealed.KeyID)
		}
	}
	var problems []string
	if len(missing) > 0 {
		problems = append(problems, "credentials are sealed with keys missing from the key ring: "+strings.Join(missing, ", "))
	}
	if len(wrong) > 0 {
		problems = append(problems, "keys that do not open the credentials they sealed (same id, different key bytes?): "+strings.Join(wrong, ", "))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// KeyUsage counts environments per sealing key.
func (s *Service) KeyUsage(ctx context.Context) (map[string]int, error) {
	samples, err := s.repo.keySamples(ctx)
	usage := make(map[string]int, len(samples))
	for _, k := range samples {
		usage[k.sealed.KeyID] = k.rows
	}
	return usage, err
}

// Rewrap re-seals every credential not sealed under the primary key with a
// fresh data key under the primary, in batches. It returns how many rows it
// re-sealed; rows locked by a concurrent writer are left for the next run
// (they are re-sealed by that writer if it rotates them).
func (s *Service) Rewrap(ctx context.Context) (int, error) {
	total := 0
	ring := s.keys.Load()
	reseal := func(id string, old secrets.Sealed) (secrets.Sealed, error) {
		plain, err := ring.Open(id, old)
		if err != nil {
			return secrets.Sealed{}, err
		}
		defer clear(plain)
		return ring.Seal(id, plain)
	}
	for {
		n, err := s.repo.resealBatch(ctx, ring.Primary(), rewrapBatch, reseal)
		total += n
		if err != nil || n == 0 {
			if total > 0 {
				s.log.InfoContext(ctx, "credentials re-sealed", "audit", true, "key_id", ring.Primary(), "environments", total)
			}
			return total, err
		}
	}
}
