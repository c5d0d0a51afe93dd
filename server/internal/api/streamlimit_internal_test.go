package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// TestStreamLimitsCountAnIPv6Slash64AsOneAddress: without an auth file
// the stream limits hold per remote address, and the addresses of one
// IPv6 /64 are one address; another /64 and each IPv4 address are their
// own.
func TestStreamLimitsCountAnIPv6Slash64AsOneAddress(t *testing.T) {
	l := StreamLimitInterceptor(StreamLimits{Streams: 1}).(*streamLimiter)
	take := func(addr string) error {
		key, who, exempt := holder(context.Background(), connect.Peer{Addr: addr})
		if exempt {
			t.Fatalf("%s is exempt", addr)
		}
		return l.take(key, who, false)
	}
	for _, addr := range []string{"[2001:db8::1]:4000", "[2001:db8:0:1::1]:4000", "192.0.2.1:4000", "192.0.2.2:4000"} {
		if err := take(addr); err != nil {
			t.Fatalf("the first stream from %s: %v", addr, err)
		}
	}
	err := take("[2001:db8::ffff:1]:4001")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "2001:db8::/64") {
		t.Errorf("a stream from another address of a /64 at its limit: %v; want ResourceExhausted naming the /64", err)
	}
	if err := take("192.0.2.1:4001"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("a second stream from an IPv4 address at its limit: %v", err)
	}
}
