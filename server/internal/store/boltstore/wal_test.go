package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// logAhead leaves dir as a crash between the log and the database leaves
// it: the store wrote keys a, b and c (revisions 1 to 3), then the log
// took a transaction that bbolt never got: a put of d and a delete of a
// (revisions 4 and 5). It returns the log, still open, for more records.
func logAhead(t *testing.T, dir string) *wal {
	t.Helper()
	s := open(t, dir)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Put(ctx, store.Put{Key: k, Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	w, err := openWAL(osFS{}, filepath.Join(dir, WALDir), defaultSegmentSize, func([]store.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.close() })
	now := time.Unix(1700000000, 0)
	if err := w.append([]store.Event{
		{Type: store.EventPut, KV: store.KeyValue{Key: "d", Value: []byte("d"), CreateRevision: 4, ModRevision: 4, Version: 1}, Time: now, More: true},
		{Type: store.EventDelete, KV: store.KeyValue{Key: "a", ModRevision: 5}, PrevRevision: 1, Time: now},
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

// checkRecovered checks that the store in dir holds the transaction
// logAhead left in the log only, and returns it.
func checkRecovered(t *testing.T, dir string) *Store {
	t.Helper()
	s := open(t, dir)
	ctx := context.Background()
	if s.Recovered() != 2 {
		t.Fatalf("recovered %d changes, want 2", s.Recovered())
	}
	if kv, _, err := s.Get(ctx, "d", 0); err != nil || string(kv.Value) != "d" || kv.ModRevision != 4 {
		t.Fatalf("d = %+v, %v", kv, err)
	}
	var nf *store.NotFoundError
	if _, _, err := s.Get(ctx, "a", 0); !errors.As(err, &nf) {
		t.Fatalf("a after its recovered delete: %v", err)
	}
	ch, err := s.Changes(ctx, 4, "", 10)
	if err != nil || len(ch.Events) != 2 || !ch.Events[0].More || ch.Events[1].More || ch.Events[1].PrevRevision != 1 {
		t.Fatalf("the change log from 4: %+v, %v", ch, err)
	}
	if res, err := s.Put(ctx, store.Put{Key: "e"}); err != nil || res.Revision != 6 {
		t.Fatalf("the next put: %+v, %v", res, err)
	}
	return s
}

func TestALogAheadOfTheDatabaseIsReplayed(t *testing.T) {
	dir := t.TempDir()
	if err := logAhead(t, dir).close(); err != nil {
		t.Fatal(err)
	}
	if err := checkRecovered(t, dir).Close(); err != nil {
		t.Fatal(err)
	}
	// The replayed segment was let go: the next open replays nothing.
	s := open(t, dir)
	if s.Recovered() != 0 {
		t.Fatalf("the second open recovered %d changes", s.Recovered())
	}
	if st, err := s.Status(context.Background()); err != nil || st.Revision != 6 {
		t.Fatalf("status after the second open: %+v, %v", st, err)
	}
}

// TestATornRecordEndsTheLog: a crash in the middle of an append leaves a
// record some of whose disk sectors were never written (zeros), or whose
// header was not, or that runs past the end of the file. Its writer was
// never answered; the records before it are recovered, and the log goes
// on after them.
func TestATornRecordEndsTheLog(t *testing.T) {
	big := func() []byte {
		return encodeWALRecord(nil, []store.Event{{Type: store.EventPut, KV: store.KeyValue{Key: "x", Value: bytes.Repeat([]byte("v"), 3*sectorSize), ModRevision: 6}}})
	}
	for _, c := range []struct {
		name   string
		damage func(rec []byte, off int64) []byte
	}{
		{"a sector never written", func(rec []byte, off int64) []byte {
			s := (off + sectorSize) &^ (sectorSize - 1) // the record's second sector
			clear(rec[s-off : s-off+sectorSize])
			return rec
		}},
		{"the first sector never written", func(rec []byte, off int64) []byte {
			s := (off + sectorSize) &^ (sectorSize - 1)
			clear(rec[:s-off])
			return rec
		}},
		{"only the first sector written", func(rec []byte, off int64) []byte {
			s := (off + sectorSize) &^ (sectorSize - 1)
			return rec[:s-off]
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := logAhead(t, dir)
			if _, err := w.cur.WriteAt(c.damage(big(), w.curOff), w.curOff); err != nil {
				t.Fatal(err)
			}
			if err := w.close(); err != nil {
				t.Fatal(err)
			}
			if err := checkRecovered(t, dir).Close(); err != nil {
				t.Fatal(err)
			}
			// The torn bytes were cut, not left for the next open.
			s := open(t, dir)
			if st, err := s.Status(context.Background()); err != nil || st.Revision != 6 {
				t.Fatalf("status after the second open: %+v, %v", st, err)
			}
		})
	}
}

// TestDamageBeforeTheLastSegmentIsRefused: only the newest segment can end
// in a torn record; damage in an older one is corruption, and Open says so
// rather than skip acknowledged writes.
func TestDamageBeforeTheLastSegmentIsRefused(t *testing.T) {
	dir := t.TempDir()
	w := logAhead(t, dir)
	first := filepath.Join(w.dir, segmentName(w.curSeq))
	if err := w.rotate(0); err != nil {
		t.Fatal(err)
	}
	if err := w.append([]store.Event{{Type: store.EventPut, KV: store.KeyValue{Key: "f", CreateRevision: 6, ModRevision: 6, Version: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(first, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], segmentHeaderSize+recordHeaderSize+2); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], segmentHeaderSize+recordHeaderSize+2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if s, err := Open(context.Background(), dir); !errors.Is(err, errCorrupt) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("open with a damaged older segment: %v", err)
	}
}

// TestSegmentsFillAndAreLetGo: with small segments, a run of puts fills
// many, each after the first a spare zeroed ahead; bbolt takes them over,
// and the full ones are deleted, so the log holds little; a reopen finds
// every key.
func TestSegmentsFillAndAreLetGo(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, withSegmentSize(8<<10))
	ctx := context.Background()
	value := make([]byte, 1000)
	const puts = 200
	for i := range puts {
		if _, err := s.Put(ctx, store.Put{Key: fmt.Sprintf("k%03d", i), Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Status(ctx); err != nil { // waits for bbolt to hold every put
		t.Fatal(err)
	}
	if s.log.curSeq < 20 {
		t.Fatalf("%d segments for %d puts of 1 kB in segments of 8 KiB", s.log.curSeq, puts)
	}
	entries, err := os.ReadDir(filepath.Join(dir, WALDir))
	if err != nil {
		t.Fatal(err)
	}
	segments := 0
	for _, e := range entries {
		if filepath.Ext(e.Name()) == segmentSuffix {
			segments++
		}
	}
	if segments > 2 {
		t.Fatalf("the log holds %d segments after bbolt took every put over", segments)
	}
	if !s.log.zeroed {
		t.Fatal("the current segment is not a spare zeroed ahead")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, WALDir, spareName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a spare outlived the store: %v", err)
	}
	s = open(t, dir, withSegmentSize(8<<10))
	page, err := s.List(ctx, "k", 0, "", puts+1)
	if err != nil || len(page.KVs) != puts || page.Revision != puts {
		t.Fatalf("after reopening: %d keys at revision %d, %v", len(page.KVs), page.Revision, err)
	}
}

// TestARecordLargerThanASegmentGetsOneOfItsOwn: a transaction bigger than
// the segment size is written whole into a segment made big enough.
func TestARecordLargerThanASegmentGetsOneOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, withSegmentSize(4<<10))
	ctx := context.Background()
	var txn store.Txn
	for i := range 20 {
		txn.Puts = append(txn.Puts, store.Put{Key: fmt.Sprintf("t%02d", i), Value: make([]byte, 1000)})
	}
	if res, err := s.Txn(ctx, txn); err != nil || res.Revision != 20 {
		t.Fatalf("txn: %+v, %v", res, err)
	}
	if s.log.curSize < 20*1000 {
		t.Fatalf("the transaction's segment has %d bytes", s.log.curSize)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, withSegmentSize(4<<10))
	if st, err := s.Status(ctx); err != nil || st.Revision != 20 {
		t.Fatalf("after reopening: %+v, %v", st, err)
	}
}

// TestAFailedLogWriteStopsTheStore: when the log cannot be written (here
// its file is closed under the writer), the write fails, and so does
// every later write and read, rather than go on without knowing what the
// log holds; a reopen recovers from what is on disk.
func TestAFailedLogWriteStopsTheStore(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	if _, err := s.Put(ctx, store.Put{Key: "a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if err := s.log.cur.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, store.Put{Key: "b"}); err == nil || !strings.Contains(err.Error(), "write the log") {
		t.Fatalf("a put into a closed log: %v", err)
	}
	if _, err := s.Put(ctx, store.Put{Key: "c"}); err == nil || !strings.Contains(err.Error(), "stopped after a failure") {
		t.Fatalf("the next put: %v", err)
	}
	if _, _, err := s.Get(ctx, "a", 0); err == nil {
		t.Fatal("a read after the failure succeeded")
	}
	_ = s.Close()
	s = open(t, dir)
	if kv, _, err := s.Get(ctx, "a", 0); err != nil || string(kv.Value) != "1" || kv.ModRevision != 1 {
		t.Fatalf("a after reopening: %+v, %v", kv, err)
	}
	if _, _, err := s.Get(ctx, "b", 0); err == nil {
		t.Fatal("b, never answered, is there")
	}
}
