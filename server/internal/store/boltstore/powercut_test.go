package boltstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// cutSegmentSize is the segment size of the power-cut tests: small, so
// that a short load fills several segments, through spares and through
// segments allocated on the spot, and bbolt lets them go.
const cutSegmentSize = 2 << 10

// cutLoad is what a load wrote, as its answers told it.
type cutLoad struct {
	// acked holds every change an answered write made, by revision.
	acked    map[int64]store.Event
	maxAcked int64
	// The write whose answer the cut took: the keys it changes and how
	// many revisions it would take. It may or may not be in the log.
	unknownKeys map[string]bool
	unknownRevs int64
}

// newCutLoad is a load that has written nothing yet, on a store that held
// before.
func newCutLoad(before map[int64]store.Event) *cutLoad {
	l := &cutLoad{acked: map[int64]store.Event{}, maxAcked: int64(len(before))}
	maps.Copy(l.acked, before)
	return l
}

// runCutLoad writes into s until a write fails (the power cut): puts,
// overwrites, deletes, compare-and-swaps that succeed and that fail, and
// transactions, with a read now and then, which makes the applier write
// into bbolt and let segments go.
// before holds the changes the store held when the load began, by
// revision.
func runCutLoad(ctx context.Context, s *Store, writes int, before map[int64]store.Event) *cutLoad {
	l := newCutLoad(before)
	live := map[string]int64{} // key -> mod revision
	value := func(i int) []byte { return []byte(fmt.Sprintf("value %d %0*d", i, 40+i%90, i)) }
	for i := range writes {
		var (
			res  store.Result
			err  error
			evs  []store.Event
			cas  bool
			keys = map[string]bool{}
		)
		key := fmt.Sprintf("k%d", i%11)
		switch {
		case i%7 == 0:
			txn := store.Txn{Puts: []store.Put{{Key: fmt.Sprintf("t%d/a", i), Value: value(i)}, {Key: fmt.Sprintf("t%d/b", i), Value: value(i + 1)}}}
			evs = []store.Event{{Type: store.EventPut, KV: store.KeyValue{Key: txn.Puts[0].Key, Value: txn.Puts[0].Value}}, {Type: store.EventPut, KV: store.KeyValue{Key: txn.Puts[1].Key, Value: txn.Puts[1].Value}}}
			if _, ok := live[key]; ok {
				txn.Deletes = []string{key}
				evs = append(evs, store.Event{Type: store.EventDelete, KV: store.KeyValue{Key: key}})
			}
			res, err = s.Txn(ctx, txn)
		case i%7 == 1 && live[key] != 0:
			evs = []store.Event{{Type: store.EventDelete, KV: store.KeyValue{Key: key}}}
			res, err = s.Delete(ctx, store.Delete{Key: key})
		case i%7 == 2 || i%7 == 3:
			expect := live[key]
			if i%7 == 3 {
				expect += 1000 // fails: no revision
				cas = true
			}
			evs = []store.Event{{Type: store.EventPut, KV: store.KeyValue{Key: key, Value: value(i)}}}
			res, err = s.Put(ctx, store.Put{Key: key, Value: value(i), ExpectModRevision: &expect})
		default:
			evs = []store.Event{{Type: store.EventPut, KV: store.KeyValue{Key: key, Value: value(i)}}}
			res, err = s.Put(ctx, store.Put{Key: key, Value: value(i)})
		}
		var mismatch *store.RevisionMismatchError
		if cas && errors.As(err, &mismatch) {
			continue // answered: nothing written
		}
		if err != nil || cas {
			for _, ev := range evs {
				keys[ev.KV.Key] = true
			}
			l.unknownKeys, l.unknownRevs = keys, int64(len(evs))
			return l
		}
		first := res.Revision - int64(len(evs)) + 1
		for j, ev := range evs {
			rev := first + int64(j)
			l.acked[rev] = ev
			if ev.Type == store.EventDelete {
				delete(live, ev.KV.Key)
			} else {
				live[ev.KV.Key] = rev
			}
		}
		l.maxAcked = res.Revision
		if i%8 == 7 {
			if _, _, err := s.Get(ctx, key, 0); err != nil && !errors.As(err, new(*store.NotFoundError)) {
				return l // the cut, seen by a read: no write is in doubt
			}
		}
	}
	return l
}

// check checks that s holds every change the load was answered for, at its
// revision, no revision twice, nothing but the write in doubt after them,
// and that the next write takes the next revision.
func (l *cutLoad) check(t *testing.T, s *Store, what string) {
	t.Helper()
	ctx := context.Background()
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatalf("%s: status: %v", what, err)
	}
	if st.Revision < l.maxAcked {
		t.Fatalf("%s: the store is at revision %d; writes up to %d were answered", what, st.Revision, l.maxAcked)
	}
	if st.Revision > l.maxAcked+l.unknownRevs {
		t.Fatalf("%s: the store is at revision %d; answered up to %d, and %d more in doubt", what, st.Revision, l.maxAcked, l.unknownRevs)
	}
	ch, err := s.Changes(ctx, 1, "", 1<<20)
	if err != nil {
		t.Fatalf("%s: changes: %v", what, err)
	}
	if int64(len(ch.Events)) != st.Revision {
		t.Fatalf("%s: %d changes up to revision %d", what, len(ch.Events), st.Revision)
	}
	for i, ev := range ch.Events {
		rev := int64(i) + 1
		if ev.Revision() != rev {
			t.Fatalf("%s: change %d has revision %d", what, i, ev.Revision())
		}
		want, ok := l.acked[rev]
		switch {
		case ok && (want.Type != ev.Type || want.KV.Key != ev.KV.Key || string(want.KV.Value) != string(ev.KV.Value)):
			t.Fatalf("%s: revision %d was answered as %v %s=%q; the store has %v %s=%q", what, rev, want.Type, want.KV.Key, want.KV.Value, ev.Type, ev.KV.Key, ev.KV.Value)
		case !ok && (rev <= l.maxAcked || !l.unknownKeys[ev.KV.Key]):
			t.Fatalf("%s: revision %d (%s) was never written", what, rev, ev.KV.Key)
		}
	}
	res, err := s.Put(ctx, store.Put{Key: "after-the-cut"})
	if err != nil || res.Revision != st.Revision+1 {
		t.Fatalf("%s: the first write after the restart: revision %d, %v; want %d", what, res.Revision, err, st.Revision+1)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// opsOf returns how many operations fs has counted.
func opsOf(c *crashFS) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops
}

// TestAPowerCutLosesNoAcknowledgedWrite cuts the power at every operation
// of the log during a load (every write, sync, creation, rename and
// removal), on a disk that loses whatever was not synced, on one that
// keeps, loses or tears each unsynced change at random, and on one that
// keeps only the newest; then, after some of the cuts, at every operation
// of the recovery itself. After every cut the store opens and holds every
// write that was answered, at its revision, and gives no revision out
// twice. Removing a sync of a record, of a new segment's header, or of the
// directory after a segment's creation or rename makes it fail.
func TestAPowerCutLosesNoAcknowledgedWrite(t *testing.T) {
	cutEverywhere(t, newCrashFS(0, loseAll, 0), nil, 60)
}

// TestAPowerCutDuringTheUpgradeLosesNothing is the same from a log of the
// previous format whose last record a crash tore: the first open replays
// it, cuts the torn record off and goes on in a segment of this format.
// Removing the sync of that cut makes it fail.
func TestAPowerCutDuringTheUpgradeLosesNothing(t *testing.T) {
	disk := newCrashFS(0, loseAll, 0)
	before := map[int64]store.Event{}
	var seg []byte
	for rev := int64(1); rev <= 5; rev++ {
		ev := store.Event{Type: store.EventPut, KV: store.KeyValue{Key: fmt.Sprintf("old/%d", rev), Value: []byte("old"), CreateRevision: rev, ModRevision: rev, Version: 1}}
		before[rev] = ev
		seg = append(seg, legacyRecord([]store.Event{ev})...)
	}
	torn := legacyRecord([]store.Event{{Type: store.EventPut, KV: store.KeyValue{Key: "old/6", ModRevision: 6}}})
	seg = append(seg, torn[:len(torn)-4]...)
	ino := &inode{data: resize(seg, cutSegmentSize)}
	ino.durable = ino.data
	disk.names["0000000000000007.wal"] = ino
	disk.durableNames["0000000000000007.wal"] = ino
	cutEverywhere(t, disk, before, 30)
}

// legacyRecord is a record of the previous format: the payload's length
// and CRC-32C, then the payload.
func legacyRecord(events []store.Event) []byte {
	rec := encodeWALRecord(nil, events)
	payload := rec[recordHeaderSize : recordHeaderSize+int(binary.LittleEndian.Uint32(rec))]
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(payload, walCRC))
	return append(b, payload...)
}

// cutEverywhere runs a load of writes on a store whose log starts as disk
// holds it (with the changes before in it), and cuts the power at every
// operation of the load and, after every third cut, of the recovery.
func cutEverywhere(t *testing.T, disk *crashFS, before map[int64]store.Event, writes int) {
	ctx := context.Background()
	root := t.TempDir()
	run := 0
	newDir := func() string {
		run++
		dir := filepath.Join(root, fmt.Sprint(run))
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	openOn := func(dir string, fsys *crashFS) (*Store, error) {
		return Open(ctx, dir, withFS(fsys), withSegmentSize(cutSegmentSize), withoutBoltSync())
	}

	// A load without a cut says how many operations there are to cut at.
	free := disk.restart(0, loseAll, 0)
	s, err := openOn(newDir(), free)
	if err != nil {
		t.Fatal(err)
	}
	runCutLoad(ctx, s, writes, before)
	total := opsOf(free)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.log.curSeq < 4 {
		t.Fatalf("the load filled %d segments; the test needs several", s.log.curSeq)
	}

	cuts, recoveryCuts := 0, 0
	for cutAt := 1; cutAt <= total; cutAt++ {
		for _, policy := range []cutPolicy{loseAll, keepSome, keepNewest} {
			what := fmt.Sprintf("cut at operation %d of %d (%v)", cutAt, total, policy)
			dir := newDir()
			fsys := disk.restart(cutAt, policy, uint64(cutAt))
			load := newCutLoad(before)
			s, err := openOn(dir, fsys)
			switch {
			case err == nil:
				load = runCutLoad(ctx, s, writes, before)
				_ = s.Close()
			case !errors.Is(err, errPowerCut): // a cut while the store opens is fine
				t.Fatalf("%s: open: %v", what, err)
			}
			cutDisk := fsys.powerCut()
			if cutDisk == nil {
				continue // the load ended before this operation
			}
			cuts++
			what = fmt.Sprintf("%s, the last operations %q", what, fsys.trace[max(0, len(fsys.trace)-6):])
			db := filepath.Join(root, fmt.Sprintf("%d.db", run))
			copyFile(t, filepath.Join(dir, FileName), db)

			// A restart after the cut, counting the recovery's operations.
			after := cutDisk.restart(0, loseAll, 0)
			s, err = openOn(dir, after)
			if err != nil {
				t.Fatalf("%s: the restart: %v", what, err)
			}
			recovery := opsOf(after)
			load.check(t, s, what)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			// A second cut during the recovery, at each of its
			// operations, then a restart from what that left. (After
			// every third cut only, to keep the test short: the
			// recovery is the same for neighbouring cuts.)
			if cutAt%3 != 0 {
				continue
			}
			for rcut := 1; rcut <= recovery; rcut++ {
				what := fmt.Sprintf("%s, then at operation %d of %d of the recovery", what, rcut, recovery)
				dir := newDir()
				copyFile(t, db, filepath.Join(dir, FileName))
				fsys := cutDisk.restart(rcut, policy, uint64(rcut))
				if s, err := openOn(dir, fsys); err == nil {
					_ = s.Close()
				} else if !errors.Is(err, errPowerCut) {
					t.Fatalf("%s: open: %v", what, err)
				}
				cutAgain := fsys.powerCut()
				if cutAgain == nil {
					t.Fatalf("%s: no cut", what)
				}
				recoveryCuts++
				s, err := openOn(dir, cutAgain.restart(0, loseAll, 0))
				if err != nil {
					t.Fatalf("%s %q: the restart: %v", what, fsys.trace, err)
				}
				load.check(t, s, fmt.Sprintf("%s %q", what, fsys.trace))
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Logf("%d operations in the load; %d cuts during it, %d during recoveries", total, cuts, recoveryCuts)
}
