package server_test

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// TestFleetReportsDoNotUseUpTheHistoryWatchersResumeFrom: a fleet's ACKs
// take many revisions, and a change-log retention of twenty revisions
// still keeps the history a watcher of the key space resumes from, because
// revisions that only record reports do not count toward it; the log's
// own bound still compacts them.
func TestFleetReportsDoNotUseUpTheHistoryWatchersResumeFrom(t *testing.T) {
	const instances = 30
	srv := testserver.Start(t, server.WithRetention(20, 0), server.WithLogRetention(400))
	ctx := context.Background()
	kv := newKV(t, srv)
	c := newCanaryRollout(t, ctx, srv)
	for i := range instances {
		register(t, c.is, fmt.Sprintf("c%d", i), "b", "z", map[string]string{"canary": "true"})
	}
	register(t, c.is, "rest", "b", "z", nil) // the second stage's one member
	from := put(t, kv, "/app/limits", "1")
	rel := c.create(10)
	for i := range instances {
		if a := c.ack(rel, fmt.Sprintf("c%d", i)); !a.GetCounted() {
			t.Fatalf("ACK of c%d not counted: %s", i, a.GetReason())
		}
	}
	reports := revision(t, kv) - from
	if reports < instances {
		t.Fatalf("the fleet's ACKs took %d revisions; want at least %d (one each) for the test to mean anything", reports, instances)
	}
	if _, err := srv.Server.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if msg := firstWatchMessage(t, kv, "/app/", from); msg.GetCompacted() != nil || len(msg.GetEvents().GetEvents()) != 1 || msg.GetEvents().GetEvents()[0].GetKv().GetModRevision() != from {
		t.Fatalf("a watch resuming at %d, %d revisions of ACKs later, got %v; want the put at %d", from, reports, msg, from)
	}

	// The log's bound: 400 revisions of any kind, so more ACKs compact
	// the resume point away after all.
	for revision(t, kv)-from <= 400 {
		for i := range instances {
			c.ack(rel, fmt.Sprintf("c%d", i))
		}
	}
	if _, err := srv.Server.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if msg := firstWatchMessage(t, kv, "/app/", from); msg.GetCompacted() == nil {
		t.Fatalf("a watch at %d, more than 400 revisions ago, got %v; want a compaction notice", from, msg)
	}
}

// revision is the store's current revision.
func revision(t *testing.T, kv interface {
	Get(context.Context, *connect.Request[pawlv1.GetRequest]) (*connect.Response[pawlv1.GetResponse], error)
}) int64 {
	t.Helper()
	resp, err := kv.Get(context.Background(), connect.NewRequest(&pawlv1.GetRequest{Key: "/app/limits"}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetRevision()
}

// firstWatchMessage opens a watch of prefix at start and returns its first
// message after the one that says it started.
func firstWatchMessage(t *testing.T, kv interface {
	Watch(context.Context, *connect.Request[pawlv1.WatchRequest]) (*connect.ServerStreamForClient[pawlv1.WatchResponse], error)
}, prefix string, start int64) *pawlv1.WatchResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: prefix, StartRevision: start}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for stream.Receive() {
		if stream.Msg().GetStarted() == nil {
			return stream.Msg()
		}
	}
	t.Fatalf("watch of %s at %d: no message: %v", prefix, start, stream.Err())
	return nil
}
