package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// DefaultAllowedCIDRs opens the private ranges on-prem clusters usually live
// in (RFC 1918 and IPv6 unique local). It deliberately leaves out loopback:
// reaching the gateway's own host must be an explicit operator choice, made
// only for tests and local development.
const DefaultAllowedCIDRs = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"

// ParseCIDRs parses a comma-separated allow-list such as DefaultAllowedCIDRs.
// Spaces around entries are ignored and an empty or blank list means no
// ranges. Because the list is operator configuration, errors give the
// 1-based position and text of the bad entry so it can be found and fixed.
func ParseCIDRs(list string) ([]netip.Prefix, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	entries := strings.Split(list, ",")
	prefixes := make([]netip.Prefix, 0, len(entries))
	for i, entry := range entries {
		entry = strings.TrimSpace(entry)
		prefix, err := parseCIDR(entry)
		if err != nil {
			return nil, fmt.Errorf("egress: CIDR list entry %d (%q): %w", i+1, entry, err)
		}
		prefixes = append(prefixes, prefix)
	}
	return prefixes, nil
}

// parseCIDR parses one entry. Empty entries are errors rather than skipped,
// since a stray comma in security configuration more likely hides a typo than
// means nothing. IPv4-mapped prefixes are refused because Check matches
// unmapped addresses, so such a prefix would silently never match.
func parseCIDR(entry string) (netip.Prefix, error) {
	if entry == "" {
		return netip.Prefix{}, errors.New("empty entry")
	}
	prefix, err := netip.ParsePrefix(entry)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not a CIDR prefix like 10.0.0.0/8: %w", err)
	}
	if prefix.Addr().Is4In6() {
		return netip.Prefix{}, errors.New("IPv4-mapped IPv6 prefix; write it in IPv4 form")
	}
	return prefix.Masked(), nil
}
