package sdk_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/server"
)

// TestASpaceFollowsAThousandKeysThroughACompaction: a space follows 1,000
// keys; cut off, it misses 1,500 changes (updates, deletes, new keys),
// which the server's short change log compacts away; reconnected, it is
// told so, reads a fresh snapshot, and its copy and its change callbacks
// end exactly at the server's keys, with no gap.
// It runs on a client's session (with an instance's identity) and by
// KVService.Watch (a client WithoutAssignments).
func TestASpaceFollowsAThousandKeysThroughACompaction(t *testing.T) {
	for _, onSession := range []bool{true, false} {
		t.Run(fmt.Sprintf("session=%v", onSession), func(t *testing.T) {
			opts := []sdk.Option{sdk.WithoutAssignments()}
			if onSession {
				opts = nil
			}
			spaceThroughACompaction(t, opts...)
		})
	}
}

func spaceThroughACompaction(t *testing.T, opts ...sdk.Option) {
	h := newHarness(t, server.WithRetention(200, 0), server.WithWatchRing(64))
	proxy := faultproxy.NewHolder(t, h.srv.Addr)
	id := ""
	if len(opts) == 0 {
		id = "reader"
	}
	c := h.clientAt("http://"+proxy.Addr, id, append(opts, sdk.WithCacheDir(t.TempDir()))...)
	put := func(key, value string) int64 {
		resp, err := h.kv.Put(h.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetRevision()
	}
	for i := range 500 {
		put(fmt.Sprintf("/flags/k%04d", i), "v0")
	}
	space, err := c.Space(h.ctx, "/flags/")
	if err != nil {
		t.Fatal(err)
	}
	defer space.Close()
	var mu sync.Mutex
	last := map[string]sdk.Change{} // each key's latest change seen
	lastRev := int64(0)
	space.OnChange(func(ch sdk.Change) {
		mu.Lock()
		defer mu.Unlock()
		if ch.Revision < lastRev {
			t.Errorf("change of %s at revision %d after revision %d", ch.Key, ch.Revision, lastRev)
		}
		lastRev = ch.Revision
		last[ch.Key] = ch
	})
	var rev int64
	for i := 500; i < 1000; i++ {
		rev = put(fmt.Sprintf("/flags/k%04d", i), "v0")
	}
	wait := func(rev int64) {
		ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
		defer cancel()
		if err := space.WaitRevision(ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	wait(rev)
	if space.Len() != 1000 {
		t.Fatalf("the space holds %d keys", space.Len())
	}

	proxy.Partition()
	// The space's stream must be gone from the server before the writes
	// it will miss: its watcher unregistered, and none registered again.
	watchers := func() int { return h.srv.Server.WatchStats().Watchers }
	for deadline := time.Now().Add(time.Minute); watchers() != 0; time.Sleep(5 * time.Millisecond) { // a bound for a loaded machine
		if time.Now().After(deadline) {
			t.Fatalf("the space's watch stream outlived the partition (%d watchers)", watchers())
		}
	}
	for i := range 1000 {
		rev = put(fmt.Sprintf("/flags/k%04d", i), "v1")
	}
	for i := 0; i < 1000; i += 4 {
		resp, err := h.kv.Delete(h.ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: fmt.Sprintf("/flags/k%04d", i)}))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Msg.GetRevision()
	}
	for i := 1000; i < 1250; i++ {
		rev = put(fmt.Sprintf("/flags/k%04d", i), "v1")
	}
	if _, err := h.srv.Server.ApplyRetention(h.ctx); err != nil { // the policy, applied now rather than soon
		t.Fatal(err)
	}
	if n := watchers(); n != 0 {
		t.Fatalf("a watch stream reached the server through the partition (%d watchers)", n)
	}
	spaceAt := space.Revision()
	proxy.Heal()
	wait(rev)
	if space.Resyncs() == 0 {
		st := h.srv.Server.WatchStats()
		t.Fatalf("the space was never told of a compaction: the test did not reach the path it is about (space at %d before healing, server at %d, %+v)",
			spaceAt, rev, st)
	}

	want := map[string][]byte{}
	for token := ""; ; {
		resp, err := h.kv.List(h.ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/flags/", Revision: rev, PageSize: 1000, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Msg.GetKvs() {
			want[kv.GetKey()] = kv.GetValue()
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	entries, _ := space.Entries()
	if len(entries) != len(want) || len(want) != 1000 {
		t.Fatalf("the space holds %d keys, the server %d", len(entries), len(want))
	}
	for _, e := range entries {
		if !bytes.Equal(want[e.Key], e.Value) {
			t.Fatalf("%s = %q, the server has %q", e.Key, e.Value, want[e.Key])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 1250 {
		key := fmt.Sprintf("/flags/k%04d", i)
		ch, ok := last[key]
		value, exists := want[key]
		switch {
		case !ok:
			t.Fatalf("no change of %s was reported", key)
		case exists && (ch.Deleted || !bytes.Equal(ch.Value, value)):
			t.Fatalf("the last change of %s is %+v; the server has %q", key, ch, value)
		case !exists && !ch.Deleted:
			t.Fatalf("%s was deleted; the last change reported is %+v", key, ch)
		}
	}
}

// TestASpaceStartsFromItsCacheWhileTheServerIsDown: a space that was
// followed with a cache directory starts from its cached copy when the
// server cannot be reached, and resumes from its revision once it is back.
func TestASpaceStartsFromItsCacheWhileTheServerIsDown(t *testing.T) {
	h := newHarness(t)
	proxy := faultproxy.NewHolder(t, h.srv.Addr)
	cache := t.TempDir()
	url := "http://" + proxy.Addr
	first := h.clientAt(url, "", sdk.WithoutAssignments(), sdk.WithCacheDir(cache))
	var rev int64
	for i := range 20 {
		resp, err := h.kv.Put(h.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/flags/k%02d", i), Value: []byte("on")}))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Msg.GetRevision()
	}
	space, err := first.Space(h.ctx, "/flags/")
	if err != nil {
		t.Fatal(err)
	}
	if space.Revision() < rev {
		t.Fatalf("the space is at %d, the store at %d", space.Revision(), rev)
	}
	if err := first.Close(); err != nil { // writes the copy to the cache
		t.Fatal(err)
	}

	proxy.Partition()
	second := h.clientAt(url, "", sdk.WithoutAssignments(), sdk.WithCacheDir(cache))
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute) // a bound for a loaded machine
	defer cancel()
	cached, err := second.Space(ctx, "/flags/")
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close()
	if e, ok := cached.Get("/flags/k07"); !ok || string(e.Value) != "on" || cached.Len() != 20 || cached.Revision() != rev {
		t.Fatalf("from the cache: %d keys at %d, k07 %+v", cached.Len(), cached.Revision(), e)
	}
	resp, err := h.kv.Put(h.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/flags/k07", Value: []byte("off")}))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	if err := cached.WaitRevision(ctx, resp.Msg.GetRevision()); err != nil {
		t.Fatal(err)
	}
	if e, _ := cached.Get("/flags/k07"); string(e.Value) != "off" || cached.Resyncs() != 0 {
		t.Fatalf("after the server came back: k07 %q, %d resyncs (the watch should resume from the cached revision)", e.Value, cached.Resyncs())
	}
}
