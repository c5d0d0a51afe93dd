package connlimit

import (
	"net/netip"
	"strings"
	"testing"
)

// TestBlock: an IPv4 address is its own block, an IPv6 address counts as
// its /64, and an IPv4-mapped IPv6 address as its IPv4 address.
func TestBlock(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7":                "192.0.2.7/32",
		"2001:db8:1:2:aaaa::1":     "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff:ffff::": "2001:db8:1:2::/64",
		"::ffff:192.0.2.7":         "192.0.2.7/32",
		"fe80::1%eth0":             "fe80::/64",
	} {
		if got := Block(netip.MustParseAddr(addr)).String(); got != want {
			t.Errorf("Block(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestPerAddressLimitCountsAnIPv6Slash64AsOne: addresses of one IPv6 /64
// share the limit per address, another /64 has its own, and IPv4
// addresses each have their own.
func TestPerAddressLimitCountsAnIPv6Slash64AsOne(t *testing.T) {
	const perAddress = 2
	l := &Listener{limits: Limits{Total: 100, PerAddress: perAddress, PerAddressFlag: "--max-conns-per-address"}, byAddr: map[netip.Prefix]int{}}
	admit := func(addr string) string { why, _ := l.admit(netip.MustParseAddr(addr), false); return why }
	for i := range perAddress {
		if why := admit("2001:db8:0:1::" + string(rune('a'+i))); why != "" {
			t.Fatalf("connection %d from the /64: refused: %s", i+1, why)
		}
	}
	why := admit("2001:db8:0:1:ffff:ffff:ffff:ffff")
	if !strings.Contains(why, "2001:db8:0:1::/64") || !strings.Contains(why, "--max-conns-per-address") {
		t.Errorf("another address of the same /64 over the limit: %q; want a refusal naming the /64 and the flag", why)
	}
	if why := admit("2001:db8:0:2::a"); why != "" {
		t.Errorf("an address of another /64: refused: %s", why)
	}
	for _, addr := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		if why := admit(addr); why != "" {
			t.Errorf("IPv4 %s: refused: %s", addr, why)
		}
	}
	l.release(netip.MustParseAddr("2001:db8:0:1::a"), false)
	if why := admit("2001:db8:0:1::beef"); why != "" {
		t.Errorf("after a connection of the /64 closed: refused: %s", why)
	}
}
