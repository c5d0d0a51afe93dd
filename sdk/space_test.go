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
	"github.com/pawlcfg/pawl/internal/faultproxy"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/server"
)

// TestASpaceFollowsAThousandKeysThroughACompaction: a space follows 1,000
// keys; cut off, it misses 1,500 changes (updates, deletes, new keys),
// which the server's short change log compacts away; reconnected, it is
// told so, reads a fresh snapshot, and its copy and its change callbacks
// end exactly at the server's keys, with no gap.
func TestASpaceFollowsAThousandKeysThroughACompaction(t *testing.T) {
	h := newHarness(t, server.WithRetention(200, 0), server.WithWatchRing(64))
	proxy := faultproxy.NewHolder(t, h.srv.Addr)
	c := h.clientAt("http://"+proxy.Addr, "", sdk.WithoutAssignments(), sdk.WithCacheDir(t.TempDir()))
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
	proxy.Heal()
	wait(rev)
	if space.Resyncs() == 0 {
		t.Fatal("the space was never told of a compaction: the test did not reach the path it is about")
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
