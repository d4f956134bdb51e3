package environments

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// rewrapBatch bounds how many rows one re-seal transaction locks.
const rewrapBatch = 100

// CheckKeys fails when a stored credential names a key the key ring lacks:
// the gateway refuses to start rather than discover it on first use.
func (s *Service) CheckKeys(ctx context.Context) error {
	usage, err := s.repo.keyUsage(ctx)
	if err != nil {
		return fmt.Errorf("check credential keys: %w", err)
	}
	var unknown []string
	for id, n := range usage {
		if !s.keys.Has(id) {
			unknown = append(unknown, fmt.Sprintf("%s (%d environments)", id, n))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("credentials are sealed with keys missing from the key ring: %s", strings.Join(unknown, ", "))
	}
	return nil
}

// KeyUsage counts environments per sealing key.
func (s *Service) KeyUsage(ctx context.Context) (map[string]int, error) {
	return s.repo.keyUsage(ctx)
}

// Rewrap re-seals every credential not sealed under the primary key with a
// fresh data key under the primary, in batches. It returns how many rows it
// re-sealed; rows locked by a concurrent writer are left for the next run
// (they are re-sealed by that writer if it rotates them).
func (s *Service) Rewrap(ctx context.Context) (int, error) {
	total := 0
	reseal := func(id string, old secrets.Sealed) (secrets.Sealed, error) {
		plain, err := s.keys.Open(id, old)
		if err != nil {
			return secrets.Sealed{}, err
		}
		defer clear(plain)
		return s.keys.Seal(id, plain)
	}
	for {
		n, err := s.repo.resealBatch(ctx, s.keys.Primary(), rewrapBatch, reseal)
		total += n
		if err != nil || n == 0 {
			if total > 0 {
				s.log.InfoContext(ctx, "credentials re-sealed", "audit", true, "key_id", s.keys.Primary(), "environments", total)
			}
			return total, err
		}
	}
}
