package egress

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseCIDRs(t *testing.T) {
	tests := []struct {
		name string
		list string
		want []string
	}{
		{"empty", "", nil},
		{"blank", "  \t ", nil},
		{"single", "10.0.0.0/8", []string{"10.0.0.0/8"}},
		{"mixed families", "10.0.0.0/8,fc00::/7", []string{"10.0.0.0/8", "fc00::/7"}},
		{"spaces", " 127.0.0.0/8 ,  ::1/128 ", []string{"127.0.0.0/8", "::1/128"}},
		{"host bits masked", "192.168.1.7/24", []string{"192.168.1.0/24"}},
		{"single host", "203.0.113.5/32", []string{"203.0.113.5/32"}},
		{"default", DefaultAllowedCIDRs, []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCIDRs(tt.list)
			if err != nil {
				t.Fatalf("ParseCIDRs(%q): %v", tt.list, err)
			}
			var want []netip.Prefix
			for _, s := range tt.want {
				want = append(want, netip.MustParsePrefix(s))
			}
			if !slices.Equal(got, want) {
				t.Errorf("ParseCIDRs(%q) = %v, want %v", tt.list, got, want)
			}
		})
	}
}

func TestParseCIDRsRejects(t *testing.T) {
	tests := []struct {
		name string
		list string
		want string // substrings the error must contain
	}{
		{"not a prefix", "10.0.0.0/8,bogus", `entry 2 ("bogus")`},
		{"bare address", "10.0.0.1", `entry 1 ("10.0.0.1")`},
		{"bits too large", "10.0.0.0/8, 172.16.0.0/33", `entry 2 ("172.16.0.0/33")`},
		{"empty entry", "10.0.0.0/8,,fc00::/7", `entry 2 (""): empty entry`},
		{"trailing comma", "10.0.0.0/8,", `entry 2 (""): empty entry`},
		{"zone", "fe80::%eth0/64", `entry 1 ("fe80::%eth0/64")`},
		{"mapped", "::ffff:10.0.0.0/104", `entry 1 ("::ffff:10.0.0.0/104"): IPv4-mapped`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCIDRs(tt.list)
			if err == nil {
				t.Fatalf("ParseCIDRs(%q) = %v, want error", tt.list, got)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseCIDRs(%q) error %q does not contain %q", tt.list, err, tt.want)
			}
		})
	}
}

// The default must never open the gateway's own host.
func TestDefaultAllowedCIDRsExcludeLoopback(t *testing.T) {
	allowed, err := ParseCIDRs(DefaultAllowedCIDRs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"127.0.0.1", "127.255.255.255", "::1"} {
		addr := netip.MustParseAddr(s)
		for _, prefix := range allowed {
			if prefix.Contains(addr) {
				t.Errorf("default prefix %s contains loopback %s", prefix, addr)
			}
		}
		if (Policy{Allowed: allowed}).Check(addr) == nil {
			t.Errorf("default policy allows loopback %s", addr)
		}
	}
}
