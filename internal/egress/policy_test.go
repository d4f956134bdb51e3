package egress

import (
	"errors"
	"net/netip"
	"testing"
)

// Reasons as Check reports them, spelled out so a changed reason is noticed.
const (
	notAllowed    = " not in SG_ALLOWED_CLUSTER_CIDRS"
	loopback      = "loopback address" + notAllowed
	rfc1918       = "private address (RFC 1918)" + notAllowed
	ula           = "unique local address (RFC 4193)" + notAllowed
	cgnat         = "shared address space (RFC 6598, carrier-grade NAT)" + notAllowed
	metadata      = "cloud metadata address"
	linkLocal     = "link-local address"
	multicast     = "multicast address"
	unspecified   = "unspecified address"
	v6OutsideGUA  = "IPv6 address outside global unicast 2000::/3" + notAllowed
	documentation = "documentation address (RFC 5737)" + notAllowed
)

// testPolicies are the allow-lists the Check table refers to by name.
func testPolicies(t *testing.T) map[string]Policy {
	t.Helper()
	policies := map[string]Policy{}
	for name, list := range map[string]string{
		"default":  DefaultAllowedCIDRs,
		"none":     "",
		"loopback": "127.0.0.0/8,::1/128",
		"all":      "0.0.0.0/0,::/0",
		"cgnat":    "100.64.0.0/10",
		"narrow":   "10.0.0.0/24",
	} {
		allowed, err := ParseCIDRs(list)
		if err != nil {
			t.Fatalf("ParseCIDRs(%q): %v", list, err)
		}
		policies[name] = Policy{Allowed: allowed}
	}
	return policies
}

func TestCheck(t *testing.T) {
	policies := testPolicies(t)
	tests := []struct {
		addr   string // "" is the zero netip.Addr
		policy string
		want   string // refusal reason; "" means allowed
	}{
		// Always refused, even when the allow-list opens everything.
		{"", "all", "invalid address"},
		{"0.0.0.0", "all", unspecified},
		{"::", "all", unspecified},
		{"::ffff:0.0.0.0", "all", unspecified},
		{"0.0.0.1", "all", "this-network address (0.0.0.0/8)"},
		{"0.255.255.255", "all", "this-network address (0.0.0.0/8)"},
		{"255.255.255.255", "all", "broadcast address"},
		{"224.0.0.1", "all", multicast},
		{"239.255.255.250", "all", multicast},
		{"ff02::1", "all", multicast},
		{"ff0e::1", "all", multicast},
		{"169.254.0.1", "all", linkLocal},
		{"169.254.255.255", "all", linkLocal},
		{"fe80::1", "all", linkLocal},
		{"fe80::1%eth0", "all", linkLocal},
		{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "all", linkLocal},
		{"169.254.169.254", "all", metadata},
		{"169.254.169.254", "default", metadata},
		{"::ffff:169.254.169.254", "all", metadata},
		{"64:ff9b::a9fe:a9fe", "all", metadata},
		{"fd00:ec2::254", "all", metadata},
		{"fd00:ec2::254", "default", metadata},
		{"100.100.100.200", "all", metadata},
		{"100.100.100.200", "cgnat", metadata},
		{"168.63.129.16", "all", metadata},
		{"168.63.129.16", "none", metadata},

		// Loopback needs an explicit allow-list entry.
		{"127.0.0.1", "default", loopback},
		{"127.255.255.254", "default", loopback},
		{"::1", "default", loopback},
		{"::ffff:127.0.0.1", "default", loopback},
		{"64:ff9b::7f00:1", "default", loopback},
		{"127.0.0.1", "none", loopback},
		{"127.0.0.1", "loopback", ""},
		{"127.1.2.3", "loopback", ""},
		{"::1", "loopback", ""},
		{"::ffff:127.0.0.1", "loopback", ""},
		{"127.0.0.1", "all", ""},

		// RFC 1918 and its boundaries.
		{"10.0.0.0", "default", ""},
		{"10.255.255.255", "default", ""},
		{"10.1.2.3", "none", rfc1918},
		{"::ffff:10.1.2.3", "none", rfc1918},
		{"::ffff:10.1.2.3", "default", ""},
		{"10.0.0.7", "narrow", ""},
		{"10.0.1.7", "narrow", rfc1918},
		{"9.255.255.255", "none", ""},
		{"11.0.0.0", "none", ""},
		{"172.15.255.255", "none", ""},
		{"172.16.0.0", "none", rfc1918},
		{"172.16.0.0", "default", ""},
		{"172.31.255.255", "none", rfc1918},
		{"172.31.255.255", "default", ""},
		{"172.32.0.0", "none", ""},
		{"192.167.255.255", "none", ""},
		{"192.168.0.0", "none", rfc1918},
		{"192.168.255.255", "default", ""},
		{"192.169.0.0", "none", ""},

		// IPv6 unique local.
		{"fc00::", "none", ula},
		{"fd12:3456::1", "none", ula},
		{"fd12:3456::1", "default", ""},
		{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "default", ""},

		// Carrier-grade NAT is not in the default list.
		{"100.63.255.255", "none", ""},
		{"100.64.0.0", "none", cgnat},
		{"100.64.0.0", "default", cgnat},
		{"100.127.255.255", "none", cgnat},
		{"100.127.255.255", "cgnat", ""},
		{"100.128.0.0", "none", ""},

		// Other special-purpose ranges.
		{"192.0.0.8", "default", "IETF protocol assignment (RFC 6890)" + notAllowed},
		{"192.0.2.1", "default", documentation},
		{"203.0.113.255", "default", documentation},
		{"2001:db8::1", "default", "documentation address (RFC 3849)" + notAllowed},
		{"198.17.255.255", "default", ""},
		{"198.18.0.0", "default", "benchmarking address (RFC 2544)" + notAllowed},
		{"198.19.255.255", "default", "benchmarking address (RFC 2544)" + notAllowed},
		{"198.20.0.0", "default", ""},
		{"2001:2::1", "default", "benchmarking address (RFC 5180)" + notAllowed},
		{"240.0.0.1", "default", "reserved address (RFC 1112)" + notAllowed},
		{"255.255.255.254", "default", "reserved address (RFC 1112)" + notAllowed},
		{"fec0::1", "default", "deprecated site-local address (RFC 3879)" + notAllowed},
		{"::7f00:1", "default", v6OutsideGUA},
		{"100::1", "default", v6OutsideGUA},
		{"64:ff9b:1::1", "default", v6OutsideGUA},
		{"4000::1", "default", v6OutsideGUA},
		{"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "none", v6OutsideGUA},
		{"::ffff:10.1.2.3", "all", ""},

		// Public unicast, in every spelling.
		{"8.8.8.8", "none", ""},
		{"8.8.8.8", "default", ""},
		{"1.1.1.1", "none", ""},
		{"::ffff:8.8.8.8", "none", ""},
		{"64:ff9b::808:808", "none", ""},
		{"2001:4860::8888", "none", ""},
		{"2000::", "none", ""},
		{"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "none", ""},
		{"2002:808:808::1", "none", ""},
	}
	for _, tt := range tests {
		t.Run(tt.policy+"/"+tt.addr, func(t *testing.T) {
			addr := parseTestAddr(t, tt.addr)
			err := policies[tt.policy].Check(addr)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want allowed", tt.addr, err)
				}
				return
			}
			var denied *DeniedError
			if !errors.As(err, &denied) {
				t.Fatalf("Check(%s) = %v, want *DeniedError", tt.addr, err)
			}
			if denied.Reason != tt.want {
				t.Errorf("Check(%s) reason = %q, want %q", tt.addr, denied.Reason, tt.want)
			}
			if denied.Addr != addr {
				t.Errorf("Check(%s) reported address %s, want the address as given", tt.addr, denied.Addr)
			}
		})
	}
}

func parseTestAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	if s == "" {
		return netip.Addr{}
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("bad test address %q: %v", s, err)
	}
	return addr
}

func TestDeniedErrorMessage(t *testing.T) {
	err := Policy{}.Check(netip.MustParseAddr("127.0.0.1"))
	want := "egress: connection to 127.0.0.1 refused: loopback address not in SG_ALLOWED_CLUSTER_CIDRS"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
}
