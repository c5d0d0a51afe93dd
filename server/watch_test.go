package server_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// watchStream is an open watch whose WatchStarted message was received.
type watchStream struct {
	*connect.ServerStreamForClient[pawlv1.WatchResponse]
	started int64
	cancel  context.CancelFunc
}

func openWatch(t testing.TB, kv pawlv1connect.KVServiceClient, prefix string, start int64) *watchStream {
	t.Helper()
	return openWatchFor(t, kv, prefix, start, time.Minute)
}

// openWatchFor is openWatch for a stream that may live up to d.
func openWatchFor(t testing.TB, kv pawlv1connect.KVServiceClient, prefix string, start int64, d time.Duration) *watchStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: prefix, StartRevision: start}))
	if err != nil {
		cancel()
		t.Fatalf("Watch: %v", err)
	}
	if !stream.Receive() || stream.Msg().GetStarted() == nil {
		cancel()
		t.Fatalf("first watch message = %v, %v; want started", stream.Msg(), stream.Err())
	}
	w := &watchStream{ServerStreamForClient: stream, started: stream.Msg().GetStarted().GetRevision(), cancel: cancel}
	t.Cleanup(w.close)
	return w
}

func (w *watchStream) close() {
	w.cancel()
	_ = w.Close()
}

// events reads until it has n events; it fails on a stream error.
func (w *watchStream) events(t testing.TB, n int) []*pawlv1.Event {
	t.Helper()
	var out []*pawlv1.Event
	for len(out) < n {
		if !w.Receive() {
			t.Fatalf("watch ended after %d of %d events: %v", len(out), n, w.Err())
		}
		out = append(out, w.Msg().GetEvents().GetEvents()...)
	}
	return out
}

// checkConsecutive fails unless events have revisions from, from+1, ...
func checkConsecutive(t testing.TB, events []*pawlv1.Event, from int64) {
	t.Helper()
	for i, ev := range events {
		if got := ev.GetKv().GetModRevision(); got != from+int64(i) {
			t.Fatalf("event %d has revision %d, want %d", i, got, from+int64(i))
		}
	}
}

func TestWatchIsOrderedWithoutGapsUnderConcurrentWriters(t *testing.T) {
	srv := testserver.Start(t)
	kv := newKV(t, srv)
	w := openWatch(t, kv, "/", 0)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				if _, err := kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/w/%d", i), Value: []byte(fmt.Sprint(j))})); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	checkConsecutive(t, w.events(t, writers*each), 1)
	wg.Wait()
}

func TestWatchResumesFromARevisionAfterReconnect(t *testing.T) {
	srv := testserver.Start(t)
	kv := newKV(t, srv)
	w := openWatch(t, kv, "/r/", 0)
	for i := range 10 {
		put(t, kv, "/r/k", fmt.Sprint(i))
	}
	first := w.events(t, 5)
	checkConsecutive(t, first, 1)
	w.close() // the client goes away mid-stream
	for i := range 10 {
		put(t, kv, "/r/k", fmt.Sprint(10+i))
	}
	last := first[len(first)-1].GetKv().GetModRevision()
	w = openWatch(t, kv, "/r/", last+1)
	if w.started != last {
		t.Fatalf("resumed watch started at %d, want %d", w.started, last)
	}
	checkConsecutive(t, w.events(t, 15), last+1)
}

func TestWatchOfCompactedRevisionGetsANotice(t *testing.T) {
	srv := testserver.Start(t, server.WithRetention(5, 0))
	kv := newKV(t, srv)
	for i := range 20 {
		put(t, kv, fmt.Sprintf("/c/%d", i%3), fmt.Sprint(i))
	}
	ctx := context.Background()
	if _, err := srv.Server.ApplyRetention(ctx); err != nil { // as the server does on its own, now
		t.Fatal(err)
	}
	stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/c/", StartRevision: 3}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no message: %v", stream.Err())
	}
	c := stream.Msg().GetCompacted()
	if c == nil || c.GetCompactRevision() != 15 || c.GetSnapshotRevision() != 20 {
		t.Fatalf("message = %v, want compacted at 15 with snapshot 20", stream.Msg())
	}
	if stream.Receive() || stream.Err() != nil {
		t.Fatalf("after the notice: %v, %v; want a clean end", stream.Msg(), stream.Err())
	}
	// The client takes the snapshot and watches on from it.
	list, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/c/", Revision: c.GetSnapshotRevision()}))
	if err != nil || len(list.Msg.GetKvs()) != 3 {
		t.Fatalf("snapshot List = %v, %v", list, err)
	}
	w := openWatch(t, kv, "/c/", c.GetSnapshotRevision()+1)
	put(t, kv, "/c/new", "x")
	checkConsecutive(t, w.events(t, 1), 21)
	// Reads below the compact revision say so.
	_, err = kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/c/0", Revision: 10}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("Get at compacted revision: %v", err)
	}
}

func TestIdleWatchGetsProgressNotifications(t *testing.T) {
	srv := testserver.Start(t, server.WithProgressInterval(10*time.Millisecond))
	kv := newKV(t, srv)
	w := openWatch(t, kv, "/quiet/", 0)
	rev := put(t, kv, "/noisy", "x")
	for w.Receive() {
		msg := w.Msg()
		if msg.GetEvents() != nil {
			t.Fatalf("event for another prefix: %v", msg)
		}
		if p := msg.GetProgress(); p != nil && p.GetRevision() == rev {
			return
		}
	}
	t.Fatalf("watch ended before progress at %d: %v", rev, w.Err())
}

// TestThousandWatchersEachReceiveEveryEvent opens 1,000 watch streams over
// several HTTP/2 connections and checks that each gets every event.
func TestThousandWatchersEachReceiveEveryEvent(t *testing.T) {
	const watchers, conns, events = 1000, 4, 20
	srv := testserver.Start(t)
	clients := make([]pawlv1connect.KVServiceClient, conns)
	for i := range clients {
		clients[i] = pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), srv.URL, connect.WithGRPC())
	}
	ws := make([]*watchStream, watchers)
	for i := range ws {
		ws[i] = openWatch(t, clients[i%conns], "/fleet/", 0)
	}
	if n := srv.Server.WatchStats().Watchers; n != watchers {
		t.Fatalf("server has %d watchers, want %d", n, watchers)
	}
	for i := range events {
		put(t, clients[0], "/fleet/config", fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			checkConsecutive(t, w.events(t, events), 1)
		}()
	}
	wg.Wait()
}

// TestSlowWatcherStillReceivesEverything stops reading one stream while far
// more is written than HTTP/2 flow control and the hub's ring hold, then
// checks the stream delivers every event in order.
func TestSlowWatcherStillReceivesEverything(t *testing.T) {
	srv := testserver.Start(t, server.WithWatchRing(16))
	kv := newKV(t, srv)
	slow := openWatch(t, kv, "/", 0)
	fast := openWatch(t, kv, "/", 0)
	const total = 600
	// 600 x 16 KiB of incompressible bytes is past the client's 4 MiB
	// stream window, so the server's sends block.
	buf := make([]byte, 16<<10)
	rand.Read(buf)
	value := string(buf)
	done := make(chan []*pawlv1.Event, 1)
	go func() { done <- fast.events(t, total) }()
	for i := range total {
		put(t, kv, fmt.Sprintf("/s/%d", i%10), value)
	}
	checkConsecutive(t, <-done, 1)
	before := srv.Server.WatchStats().LogCatchUps
	checkConsecutive(t, slow.events(t, total), 1)
	if srv.Server.WatchStats().LogCatchUps == before {
		t.Fatal("the slow watcher never fell back to the change log; the test did not exercise catch-up")
	}
	put(t, kv, "/s/live", "x")
	checkConsecutive(t, slow.events(t, 1), total+1)
}

func TestShutdownEndsWatchStreamsWithUnavailable(t *testing.T) {
	srv := testserver.Start(t)
	kv := newKV(t, srv)
	w := openWatch(t, kv, "/", 0)
	srv.Stop()
	for w.Receive() {
	}
	if code := connect.CodeOf(w.Err()); code != connect.CodeUnavailable {
		t.Fatalf("watch ended with %v, want unavailable", w.Err())
	}
	_, err := kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: "/after", Value: []byte("x")}))
	if err == nil {
		t.Fatal("Put succeeded after shutdown")
	}
}

// clientFor is used by benchmarks to spread streams over connections.
func clientFor(tb testing.TB, srv *testserver.Server) (pawlv1connect.KVServiceClient, *http.Client) {
	c := testserver.HTTPClient(tb)
	return pawlv1connect.NewKVServiceClient(c, srv.URL, connect.WithGRPC()), c
}
