package egress

import (
	"net/netip"
)

// allowListVar names the operator setting that fills Policy.Allowed, so a
// refusal tells the operator what to change.
const allowListVar = "SG_ALLOWED_CLUSTER_CIDRS"

var (
	ipv4Broadcast = netip.MustParseAddr("255.255.255.255")
	thisNetwork   = netip.MustParsePrefix("0.0.0.0/8")
	// nat64 is the well-known NAT64 prefix (RFC 6052): a NAT64 gateway
	// forwards these to the IPv4 address in the low 32 bits.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
)

// metadataAddrs are cloud instance-metadata endpoints. They are refused by
// exact address, ahead of their ranges, because they hand out credentials and
// some sit inside ranges an operator may open (100.64.0.0/10, fc00::/7) or in
// public space (168.63.129.16).
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true, // AWS, GCP, Azure, OCI
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS over IPv6
	netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"):   true, // Azure wireserver
}

// namedRange pairs a range with the words a refusal uses for it.
type namedRange struct {
	prefix netip.Prefix
	reason string
}

func newRange(cidr, reason string) namedRange {
	return namedRange{prefix: netip.MustParsePrefix(cidr), reason: reason}
}

// restrictedRanges are not globally reachable, so a cluster found there is
// on a network the operator must vouch for via the allow-list. The first
// match names the reason, so specific ranges precede the IPv6 catch-all
// (everything outside 2000::/3, which IANA has not allocated for global
// unicast), and loopback precedes both.
var restrictedRanges = []namedRange{
	newRange("127.0.0.0/8", "loopback address"),
	newRange("::1/128", "loopback address"),
	newRange("10.0.0.0/8", "private address (RFC 1918)"),
	newRange("172.16.0.0/12", "private address (RFC 1918)"),
	newRange("192.168.0.0/16", "private address (RFC 1918)"),
	newRange("fc00::/7", "unique local address (RFC 4193)"),
	newRange("100.64.0.0/10", "shared address space (RFC 6598, carrier-grade NAT)"),
	newRange("192.0.0.0/24", "IETF protocol assignment (RFC 6890)"),
	newRange("192.0.2.0/24", "documentation address (RFC 5737)"),
	newRange("198.51.100.0/24", "documentation address (RFC 5737)"),
	newRange("203.0.113.0/24", "documentation address (RFC 5737)"),
	newRange("2001:db8::/32", "documentation address (RFC 3849)"),
	newRange("3fff::/20", "documentation address (RFC 9637)"),
	newRange("198.18.0.0/15", "benchmarking address (RFC 2544)"),
	newRange("2001:2::/48", "benchmarking address (RFC 5180)"),
	newRange("240.0.0.0/4", "reserved address (RFC 1112)"),
	newRange("fec0::/10", "deprecated site-local address (RFC 3879)"),
	newRange("::/3", "IPv6 address outside global unicast 2000::/3"),
	newRange("4000::/2", "IPv6 address outside global unicast 2000::/3"),
	newRange("8000::/1", "IPv6 address outside global unicast 2000::/3"),
}

// Policy decides which resolved addresses the gateway may connect to. The
// zero value refuses every restricted range, which is the safe default when
// configuration is missing.
type Policy struct {
	// Allowed opens restricted ranges (loopback, private, ...). It cannot
	// open always-refused addresses. Prefixes are matched against unmapped
	// addresses, so IPv4 ranges must be written in IPv4 form.
	Allowed []netip.Prefix
}

// Check reports whether the gateway may connect to addr: nil, or a
// *DeniedError saying why not. It is called on resolved addresses, never on
// host names, so what it judges is what the socket will reach.
func (p Policy) Check(addr netip.Addr) error {
	a := canonical(addr)
	if reason := refusedReason(a); reason != "" {
		return &DeniedError{Addr: addr, Reason: reason}
	}
	if reason := restrictedReason(a); reason != "" && !p.allows(a) {
		return &DeniedError{Addr: addr, Reason: reason + " not in " + allowListVar}
	}
	return nil
}

// canonical rewrites addr to the IPv4 or IPv6 address it actually reaches,
// so alternative spellings cannot dodge a range: zones are dropped, mapped
// addresses unmapped and NAT64 addresses reduced to their IPv4 target.
func canonical(addr netip.Addr) netip.Addr {
	a := addr.WithZone("").Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}

// refusedReason names why a is refused regardless of the allow-list, or
// returns "" if it is not. Metadata is tested before link-local so the more
// alarming reason is the one logged.
func refusedReason(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "invalid address"
	case a.IsUnspecified():
		return "unspecified address"
	case metadataAddrs[a]:
		return "cloud metadata address"
	case a == ipv4Broadcast:
		return "broadcast address"
	case a.IsMulticast():
		return "multicast address"
	case a.IsLinkLocalUnicast():
		return "link-local address"
	case thisNetwork.Contains(a):
		return "this-network address (0.0.0.0/8)"
	}
	return ""
}

// restrictedReason names the restricted range holding a, or returns "" if a
// is public.
func restrictedReason(a netip.Addr) string {
	for _, r := range restrictedRanges {
		if r.prefix.Contains(a) {
			return r.reason
		}
	}
	return ""
}

func (p Policy) allows(a netip.Addr) bool {
	for _, prefix := range p.Allowed {
		if prefix.Contains(a) {
			return true
		}
	}
	return false
}

// DeniedError is the refusal of one address. It is a distinct type so callers
// can tell a policy refusal (an admin's configuration problem) from a network
// failure with errors.As.
type DeniedError struct {
	// Addr is the address as it was checked, before unmapping.
	Addr netip.Addr
	// Reason says which rule refused it.
	Reason string
}

func (e *DeniedError) Error() string {
	return "egress: connection to " + e.Addr.String() + " refused: " + e.Reason
}
