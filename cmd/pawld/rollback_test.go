package main_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/pawldtest"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
)

// TestRedisRestartedFromAnOlderSnapshot: pawld on a private redis-server
// without an append-only file logs what that promises; Redis saves a
// snapshot at revision 20, takes 30 more writes, and is killed and
// restarted from the snapshot. The watch stream says stale and why, a
// write fails with FAILED_PRECONDITION, and once a second pawld starts
// with --redis-accept-rollback (which logs it) the watch stream is told
// to take a snapshot, which holds the true state (the 20 keys), and
// writes go on above every revision handed out before.
func TestRedisRestartedFromAnOlderSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts a redis-server and two pawld")
	}
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr + "/0"
	a := pawldtest.Start(t, "--store", url, "--redis-prefix", "back")
	if !strings.Contains(a.Logs(), "no persistence") {
		t.Fatalf("pawld did not say what Redis without persistence promises:\n%s", a.Logs())
	}
	kv := kvClient(t, a.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put := func(key string) (int64, error) {
		res, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte("v")}))
		if err != nil {
			return 0, err
		}
		return res.Msg.GetRevision(), nil
	}
	for i := range 20 {
		if _, err := put(fmt.Sprintf("/app/kept/%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Client(t).Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var highest int64
	for i := range 30 {
		rev, err := put(fmt.Sprintf("/app/lost/%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		highest = rev
	}
	stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/app/", StartRevision: highest + 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStarted() == nil {
		t.Fatalf("watch: %v %v", stream.Msg(), stream.Err())
	}
	srv.Kill(t)
	srv.Restart(t)
	// Receive until a message says Redis went back in time.
	for {
		if !stream.Receive() {
			t.Fatalf("the watch ended before it said Redis went back in time: %v", stream.Err())
		}
		if s := stream.Msg().GetStale(); s != nil && strings.Contains(s.GetReason(), "went back in time") {
			t.Logf("stale: %s", s.GetReason())
			break
		}
	}
	if _, err := put("/app/refused"); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--redis-accept-rollback") {
		t.Fatalf("a write after the rollback: %v; want FAILED_PRECONDITION naming --redis-accept-rollback", err)
	}

	b := pawldtest.Start(t, "--store", url, "--redis-prefix", "back", "--redis-accept-rollback")
	if !strings.Contains(b.Logs(), "accepted a rollback of the Redis store") {
		t.Fatalf("the accepting pawld did not log it:\n%s", b.Logs())
	}
	var snapshot int64
	for snapshot == 0 {
		if !stream.Receive() {
			t.Fatalf("the watch ended before it was told to take a snapshot: %v", stream.Err())
		}
		if c := stream.Msg().GetCompacted(); c != nil {
			snapshot = c.GetSnapshotRevision()
		}
	}
	if snapshot <= highest {
		t.Fatalf("told to take a snapshot at %d; revision %d was handed out before", snapshot, highest)
	}
	list, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/app/", Revision: snapshot}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Msg.GetKvs()); n != 20 {
		t.Fatalf("the snapshot holds %d keys; want the 20 kept", n)
	}
	for _, kv := range list.Msg.GetKvs() {
		if !strings.HasPrefix(kv.GetKey(), "/app/kept/") {
			t.Fatalf("the snapshot holds %s, lost with the rollback", kv.GetKey())
		}
	}
	rev, err := put("/app/after")
	if err != nil || rev <= highest {
		t.Fatalf("a write after the acceptance: revision %d, %v; want above %d", rev, err, highest)
	}
}
