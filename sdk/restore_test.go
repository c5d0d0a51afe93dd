package sdk_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/snapshotfile"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/server"
)

// TestWatchersOfARestoredStoreAreToldToResynchronise: a raw watch and an
// SDK space follow a store past the revision of a snapshot of it; the
// store is replaced by its restored snapshot, which takes writes of its
// own (revisions the watchers saw, with other changes). Resuming, both
// are told that the store is another incarnation, and both end with the
// restored store's keys, not a mix of the two histories.
func TestWatchersOfARestoredStoreAreToldToResynchronise(t *testing.T) {
	if testserver.Engine() == "redis" {
		t.Skip("the embedded store's backups; Redis is backed up by Redis")
	}
	skipUnderAuth(t) // it starts the restored server itself, open
	h := newHarness(t)
	put := func(kv pawlv1connect.KVServiceClient, key, value string) int64 {
		t.Helper()
		resp, err := kv.Put(h.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetRevision()
	}
	for i := range 10 {
		put(h.kv, fmt.Sprintf("/flags/k%d", i), "v1")
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	mc := pawlv1connect.NewMaintenanceServiceClient(testserver.HTTPClient(t), h.srv.URL)
	saved, err := snapshotfile.Save(h.ctx, mc, h.srv.URL, file, time.Minute)
	if err != nil || saved.Revision != 10 || saved.Incarnation == "" {
		t.Fatalf("save = %+v, %v; want revision 10 with an incarnation", saved, err)
	}

	c := h.clientAt(h.srv.URL, "space", sdk.WithoutAssignments())
	space, err := c.Space(h.ctx, "/flags/")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := h.kv.Watch(h.ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/flags/", StartRevision: 11}))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if !raw.Receive() || raw.Msg().GetStarted().GetIncarnation() != saved.Incarnation {
		t.Fatalf("started %v, %v; want incarnation %s", raw.Msg(), raw.Err(), saved.Incarnation)
	}
	oldIncarnation := raw.Msg().GetStarted().GetIncarnation()
	// The old store goes on past the snapshot: revisions 11..30.
	for i := range 20 {
		put(h.kv, fmt.Sprintf("/flags/k%d", i%15), "old-history")
	}
	var seen int64
	for seen < 30 && raw.Receive() {
		for _, ev := range raw.Msg().GetEvents().GetEvents() {
			seen = ev.GetKv().GetModRevision()
		}
	}
	if err := space.WaitRevision(h.ctx, 30); err != nil {
		t.Fatal(err)
	}
	// /flags/k10 exists only in the old history: the space's resync with
	// the restored store deletes it.
	resynced := make(chan struct{})
	stop := space.OnChange(func(ch sdk.Change) {
		if ch.Key == "/flags/k10" && ch.Deleted {
			close(resynced)
		}
	})
	defer stop()

	// The store is replaced by the restored snapshot, at the same address,
	// which writes revisions 11..40 of its own.
	addr := h.srv.Addr
	h.srv.Stop()
	dir := filepath.Join(t.TempDir(), "restored")
	restored, err := server.Restore(h.ctx, file, dir)
	if err != nil || restored.Revision != 10 || restored.Incarnation == oldIncarnation {
		t.Fatalf("restore = %+v, %v", restored, err)
	}
	h.connect(testserver.StartAt(t, dir, addr))
	// The space resumes against the restored store at its revision 10,
	// below the 30 it had: it must still take the restored keys.
	wait, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	select {
	case <-resynced:
	case <-wait.Done():
		t.Fatalf("the space never took the restored store's keys: at revision %d after %d resyncs", space.Revision(), space.Resyncs())
	}
	if entries, rev := space.Entries(); rev != 10 || len(entries) != 10 {
		t.Fatalf("space after the resync: %d keys at revision %d; want the snapshot's 10 at revision 10", len(entries), rev)
	}
	for i := range 30 {
		put(h.kv, fmt.Sprintf("/flags/n%d", i%12), "new-history")
	}

	// The raw watcher resumes after the last revision it saw, with the
	// incarnation it saw: it is told to take a snapshot.
	resumed, err := h.kv.Watch(h.ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/flags/", StartRevision: seen + 1, Incarnation: oldIncarnation}))
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	var msgs []*pawlv1.WatchResponse
	for resumed.Receive() {
		msgs = append(msgs, resumed.Msg())
	}
	if len(msgs) != 2 || msgs[0].GetStarted().GetIncarnation() != restored.Incarnation ||
		msgs[1].GetCompacted().GetReason() != pawlv1.WatchResyncReason_WATCH_RESYNC_REASON_INCARNATION_CHANGED ||
		msgs[1].GetCompacted().GetSnapshotRevision() != 40 {
		t.Fatalf("resumed watch = %v, %v; want started with incarnation %s, then a resync at revision 40", msgs, resumed.Err(), restored.Incarnation)
	}
	want, err := h.kv.List(h.ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/flags/", Revision: 40, PageSize: 1000}))
	if err != nil {
		t.Fatal(err)
	}

	// The space does the same on its own, and ends with the restored keys.
	if err := space.WaitRevision(h.ctx, 40); err != nil {
		t.Fatal(err)
	}
	entries, rev := space.Entries()
	if rev != 40 || space.Resyncs() == 0 || len(entries) != len(want.Msg.GetKvs()) {
		t.Fatalf("space at revision %d with %d keys after %d resyncs; want revision 40, %d keys, a resync", rev, len(entries), space.Resyncs(), len(want.Msg.GetKvs()))
	}
	for i, kv := range want.Msg.GetKvs() {
		e := entries[i]
		if e.Key != kv.GetKey() || string(e.Value) != string(kv.GetValue()) || e.ModRevision != kv.GetModRevision() {
			t.Fatalf("space entry %d = %s %q @%d; the restored store has %s %q @%d", i, e.Key, e.Value, e.ModRevision, kv.GetKey(), kv.GetValue(), kv.GetModRevision())
		}
	}
}
