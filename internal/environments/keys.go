package environments

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// KeyUse is what the stored credentials say about one key id.
type KeyUse struct {
	// Environments counts the credentials sealed under the id.
	Environments int
	// Unopened names the environments whose credentials the ring's key of
	// that id does not open: all of them when the ring lacks the id, or has
	// a key of that id with other bytes.
	Unopened []string
}

// KeyUsage opens every stored credential with the current key ring and
// reports, per key id the credentials name, how many it seals and which it
// cannot open: counting seals alone would call a key fine whose bytes differ
// from the one that sealed them.
func (s *Service) KeyUsage(ctx context.Context) (map[string]*KeyUse, error) {
	return s.keyUsage(ctx, s.keys.Load())
}

func (s *Service) keyUsage(ctx context.Context, ring *secrets.KeyRing) (map[string]*KeyUse, error) {
	usage := map[string]*KeyUse{}
	err := s.repo.eachCredential(ctx, func(id string, sealed secrets.Sealed) error {
		use := usage[sealed.KeyID]
		if use == nil {
			use = &KeyUse{}
			usage[sealed.KeyID] = use
		}
		use.Environments++
		plain, err := ring.Open(id, sealed)
		clear(plain)
		if err != nil {
			use.Unopened = append(use.Unopened, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check credential keys: %w", err)
	}
	return usage, nil
}

// checkKeys opens every stored credential with ring. It fails when a
// credential names a key the ring lacks, or when not one credential under a
// key opens (the ring has a key of that id with other bytes): either way
// every such environment would be unusable. A credential that does not open
// while others under its key do is damage to that row alone: it is logged
// for its environment, which the probes then report UNAUTHORIZED until an
// admin rotates its credentials.
func (s *Service) checkKeys(ctx context.Context, ring *secrets.KeyRing) error {
	usage, err := s.keyUsage(ctx, ring)
	if err != nil {
		return err
	}
	var missing, wrong, unreadable []string
	known := ring.IDs()
	for _, keyID := range slices.Sorted(maps.Keys(usage)) {
		use := usage[keyID]
		switch {
		case !slices.Contains(known, keyID):
			missing = append(missing, fmt.Sprintf("%s (%d environments)", keyID, use.Environments))
		case len(use.Unopened) == use.Environments:
			wrong = append(wrong, fmt.Sprintf("%s (%d environments)", keyID, use.Environments))
		default:
			unreadable = append(unreadable, use.Unopened...)
		}
	}
	var problems []string
	if len(missing) > 0 {
		problems = append(problems, "credentials are sealed with keys missing from the key ring: "+strings.Join(missing, ", "))
	}
	if len(wrong) > 0 {
		problems = append(problems, "keys that open none of the credentials they sealed (same id, different key bytes?): "+strings.Join(wrong, ", "))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	for _, id := range unreadable {
		s.log.ErrorContext(ctx, "stored credentials cannot be opened (damaged, or restored from an older copy); rotate them",
			"environment", id)
	}
	return nil
}

// UpgradeSeals re-seals credentials still in the legacy format (sealed
// before credential generations existed) so they gain a generation; serve
// runs it at start.
func (s *Service) UpgradeSeals(ctx context.Context) error {
	_, _, err := s.reseal(ctx, true)
	return err
}

// Rewrap re-seals every credential not sealed under the primary key with a
// fresh data key under the primary, in batches. It returns how many rows it
// re-sealed and the environments whose credentials do not open (they keep
// their seal, and their old key stays in use, until an admin rotates them);
// rows locked by a concurrent writer are left for the next run (they are
// re-sealed by that writer if it rotates them).
func (s *Service) Rewrap(ctx context.Context) (int, []string, error) {
	return s.reseal(ctx, false)
}

func (s *Service) reseal(ctx context.Context, legacyOnly bool) (int, []string, error) {
	total, after := 0, ""
	var unreadable []string
	ring := s.keys.Load()
	reseal := func(id string, old secrets.Sealed, gen int64) (secrets.Sealed, error) {
		plain, err := ring.Open(id, old)
		if err != nil {
			return secrets.Sealed{}, err
		}
		defer clear(plain)
		return ring.Seal(id, gen, plain)
	}
	for {
		n, last, skipped, err := s.repo.resealBatch(ctx, ring.Primary(), legacyOnly, after, rewrapBatch, reseal)
		total += n
		unreadable = append(unreadable, skipped...)
		if err != nil || last == "" {
			if total > 0 {
				s.log.InfoContext(ctx, "credentials re-sealed", "audit", true, "key_id", ring.Primary(), "environments", total)
			}
			for _, id := range unreadable {
				s.log.ErrorContext(ctx, "stored credentials cannot be opened, so they were not re-sealed; rotate them", "environment", id)
			}
			return total, unreadable, err
		}
		after = last
	}
}

// KeyRing is the key ring in use now (ReplaceKeys swaps it).
func (s *Service) KeyRing() *secrets.KeyRing { return s.keys.Load() }
