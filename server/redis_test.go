package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// TestRedisUnreachable cuts a replica off from Redis (a partition in a
// proxy between them): its writes fail with Unavailable and say why, its
// watch streams say they are stale and report no progress, a write made
// meanwhile through another replica reaches them once Redis is back, and
// nothing acknowledged before is lost.
func TestRedisUnreachable(t *testing.T) {
	_, prefix := redistest.Shared(t)
	proxy := faultproxy.NewHolder(t, redistest.Addr())
	cutOff := testserver.Start(t, server.WithStore("redis://"+proxy.Addr+"/0"), server.WithRedisPrefix(prefix),
		server.WithProgressInterval(50*time.Millisecond))
	other := testserver.Start(t, server.WithStore("redis://"+redistest.Addr()+"/0"), server.WithRedisPrefix(prefix))
	kv, otherKV := newKV(t, cutOff), newKV(t, other)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first := put(t, kv, "/r/before", "acked")
	stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/r/", StartRevision: first + 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	next := func() *pawlv1.WatchResponse {
		t.Helper()
		if !stream.Receive() {
			t.Fatalf("watch ended: %v", stream.Err())
		}
		return stream.Msg()
	}
	if next().GetStarted() == nil {
		t.Fatal("no WatchStarted first")
	}

	proxy.Partition()
	_, err = kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/r/during", Value: []byte("x")}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("a write while Redis is unreachable = %v, want Unavailable saying why", err)
	}
	// Progress may still come until the feed notices; then one stale
	// notice, and nothing else while Redis stays unreachable.
	var stale *pawlv1.WatchStale
	for stale == nil {
		m := next()
		if m.GetEvents() != nil {
			t.Fatalf("events while cut off: %v", m)
		}
		stale = m.GetStale()
	}
	if stale.GetRevision() != first || stale.GetReason() == "" {
		t.Fatalf("stale notice %v; want revision %d and a reason", stale, first)
	}
	during := put(t, otherKV, "/r/elsewhere", "written through the other replica")

	proxy.Heal()
	var got []string
	for len(got) == 0 {
		m := next()
		if m.GetStale() != nil {
			t.Fatalf("a second stale notice: %v", m)
		}
		for _, ev := range m.GetEvents().GetEvents() {
			got = append(got, ev.GetKv().GetKey())
			if ev.GetKv().GetModRevision() != during {
				t.Fatalf("after healing, revision %d came first; want %d", ev.GetKv().GetModRevision(), during)
			}
		}
	}
	resp, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/r/before"}))
	if err != nil || string(resp.Msg.GetKv().GetValue()) != "acked" {
		t.Fatalf("the write acknowledged before the partition: %v, %v", resp, err)
	}
	if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/r/after", Value: []byte("y")})); err != nil {
		t.Fatalf("a write after healing: %v", err)
	}
}

// TestBadStoreFlagsFail: a store URL that is not Redis, or a Redis that
// does not answer, stops New with a clear error.
func TestBadStoreFlagsFail(t *testing.T) {
	for _, c := range []struct {
		opts []server.Option
		want string
	}{
		{[]server.Option{server.WithStore("postgres://x")}, "want a redis://"},
		{[]server.Option{server.WithStore("redis://127.0.0.1:1/0")}, "unavailable"},
		{[]server.Option{server.WithStore("redis://127.0.0.1:6379/0"), server.WithRedisPrefix("a{b}")}, "without braces"},
	} {
		_, err := server.New(context.Background(), append(c.opts, server.WithDataDir(t.TempDir()))...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%v) = %v, want an error saying %q", c.opts, err, c.want)
		}
	}
}
