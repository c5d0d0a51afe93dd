package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// TestATxnReachesEveryWatcherAsOneMessage: a deploy of 100 keys, an index
// and a removal, committed atomically, arrives at each watcher as one
// WatchEvents message of consecutive revisions.
func TestATxnReachesEveryWatcherAsOneMessage(t *testing.T) {
	srv := testserver.Start(t)
	kv := newKV(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put(t, kv, "/cfg/retired", "x")
	var streams []*connect.ServerStreamForClient[pawlv1.WatchResponse]
	for range 6 {
		s, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/cfg/"}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Receive() || s.Msg().GetStarted() == nil {
			t.Fatalf("no WatchStarted: %v", s.Err())
		}
		streams = append(streams, s)
	}
	req := &pawlv1.TxnRequest{Compares: []*pawlv1.TxnCompare{{Key: "/cfg/index", ModRevision: 0}}}
	for i := range 100 {
		req.Ops = append(req.Ops, &pawlv1.TxnOp{Key: fmt.Sprintf("/cfg/k%03d", i), Value: []byte(strings.Repeat("v", 1024))})
	}
	req.Ops = append(req.Ops, &pawlv1.TxnOp{Key: "/cfg/index", Value: []byte("100 keys")}, &pawlv1.TxnOp{Key: "/cfg/retired", Delete: true})
	resp, err := kv.Txn(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.GetRevision() != 103 {
		t.Fatalf("the transaction ended at revision %d, want 103", resp.Msg.GetRevision())
	}
	for i, s := range streams {
		if !s.Receive() {
			t.Fatalf("watcher %d: %v", i, s.Err())
		}
		evs := s.Msg().GetEvents().GetEvents()
		if len(evs) != 102 {
			t.Fatalf("watcher %d got %d events in its first message, want the 102 changes", i, len(evs))
		}
		for j, ev := range evs {
			if ev.GetKv().GetModRevision() != int64(2+j) {
				t.Fatalf("watcher %d: event %d at revision %d", i, j, ev.GetKv().GetModRevision())
			}
		}
		if last := evs[101]; last.GetType() != pawlv1.EventType_EVENT_TYPE_DELETE || last.GetKv().GetKey() != "/cfg/retired" {
			t.Fatalf("watcher %d: the last change is %v", i, last)
		}
	}
	// Each stream got the same 100 KiB message, gzipped (the clients
	// accept it): it was compressed once, or twice when no stream asked
	// for it while the first compressed it (the cache keeps a message
	// the second time it comes), not once per stream.
	if n := srv.Server.WatchStats().Compressions; n < 1 || n > 2 {
		t.Fatalf("the batch was compressed %d times for %d streams, want once or twice", n, len(streams))
	}
	// The compare on /cfg/index (now present) fails: nothing changes.
	_, err = kv.Txn(ctx, connect.NewRequest(req))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("a transaction whose compare fails = %v, want FailedPrecondition", err)
	}
	if rev := currentRevision(t, kv); rev != 103 {
		t.Fatalf("revision %d after a failed transaction", rev)
	}
}

// TestBadTxnsAreRefusedAndChangeNothing: each malformed or oversized
// transaction gets its code and a message saying what is wrong.
func TestBadTxnsAreRefusedAndChangeNothing(t *testing.T) {
	srv := testserver.Start(t, server.WithTxnLimits(10, 4096), server.WithMaxValueBytes(1024))
	kv := newKV(t, srv)
	put(t, kv, "/a", "1")
	op := func(key, value string) *pawlv1.TxnOp { return &pawlv1.TxnOp{Key: key, Value: []byte(value)} }
	many := func(n, size int) []*pawlv1.TxnOp {
		var ops []*pawlv1.TxnOp
		for i := range n {
			ops = append(ops, op(fmt.Sprintf("/m/%d", i), strings.Repeat("x", size)))
		}
		return ops
	}
	for _, c := range []struct {
		name string
		req  *pawlv1.TxnRequest
		code connect.Code
		says string
	}{
		{"no ops", &pawlv1.TxnRequest{}, connect.CodeInvalidArgument, "at least one op"},
		{"a key twice", &pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{op("/b", "1"), {Key: "/b", Delete: true}}}, connect.CodeInvalidArgument, "both change /b"},
		{"a bad key", &pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{op("no-slash", "1")}}, connect.CodeInvalidArgument, "op 0"},
		{"a system key", &pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{op("/_pawl/x", "1")}}, connect.CodePermissionDenied, "op 0"},
		{"a delete with a value", &pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{{Key: "/a", Delete: true, Value: []byte("x")}}}, connect.CodeInvalidArgument, "carries a value"},
		{"too many ops", &pawlv1.TxnRequest{Ops: many(11, 1)}, connect.CodeResourceExhausted, "--max-txn-ops"},
		{"too many bytes", &pawlv1.TxnRequest{Ops: many(5, 1000)}, connect.CodeResourceExhausted, "--max-txn-bytes"},
		{"a value too long", &pawlv1.TxnRequest{Ops: many(1, 1025)}, connect.CodeResourceExhausted, "--max-value-bytes"},
		{"a negative compare", &pawlv1.TxnRequest{Compares: []*pawlv1.TxnCompare{{Key: "/a", ModRevision: -1}}, Ops: many(1, 1)}, connect.CodeInvalidArgument, "compare 0"},
		{"a bad compare key", &pawlv1.TxnRequest{Compares: []*pawlv1.TxnCompare{{Key: "a"}}, Ops: many(1, 1)}, connect.CodeInvalidArgument, "compare 0"},
	} {
		_, err := kv.Txn(context.Background(), connect.NewRequest(c.req))
		if connect.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want %v saying %q", c.name, err, c.code, c.says)
		}
	}
	if rev := currentRevision(t, kv); rev != 1 {
		t.Fatalf("revision %d after refused transactions", rev)
	}
}

// TestListPagesAreBoundedByBytes: a listing of large values ends its
// pages at 4 MiB, whatever the page size asked, and its later pages keep
// the first page's revision while writes go on.
func TestListPagesAreBoundedByBytes(t *testing.T) {
	srv := testserver.Start(t)
	kv := newKV(t, srv)
	ctx := context.Background()
	value := strings.Repeat("v", 200<<10)
	for i := range 40 {
		put(t, kv, fmt.Sprintf("/big/%02d", i), value)
	}
	var keys []string
	var pages int
	var rev int64
	for token := ""; ; {
		resp, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/big/", PageSize: 1000, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		pages++
		size := 0
		for _, k := range resp.Msg.GetKvs() {
			keys = append(keys, k.GetKey())
			size += len(k.GetKey()) + len(k.GetValue())
		}
		if size > 4<<20+200<<10+16 {
			t.Fatalf("page %d holds %d bytes", pages, size)
		}
		if pages == 1 {
			rev = resp.Msg.GetRevision()
			put(t, kv, "/big/zz-after-the-first-page", "late")
		} else if resp.Msg.GetRevision() != rev {
			t.Fatalf("page %d at revision %d, the first at %d", pages, resp.Msg.GetRevision(), rev)
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	if pages < 2 || len(keys) != 40 {
		t.Fatalf("%d pages, %d keys; want at least 2 pages and the 40 keys of the first revision", pages, len(keys))
	}
}
