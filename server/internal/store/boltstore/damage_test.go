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

// TestDamageAnywhereIsRecoveredOrRefused flips a byte at every offset of
// an older segment and of the newest one of a log that bbolt holds none
// of: segment headers, record headers (their lengths), payloads,
// padding, trailers and the zeros after the last record. Every time,
// Open either recovers every record (the damage was where no record is,
// or in the zeros a torn write could have left) or refuses with an error
// that names the segment, the offset and the revisions at stake; it never
// opens without an acknowledged write, and the next write never takes a
// revision already given out.
func TestDamageAnywhereIsRecoveredOrRefused(t *testing.T) {
	const segSize = 1 << 10
	disk := newCrashFS(0, loseAll, 0)
	w, err := openWAL(disk, WALDir, segSize, func([]store.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var rev int64
	for w.curSeq < 2 || w.curOff < segSize/2 {
		rev++
		ev := store.Event{Type: store.EventPut, KV: store.KeyValue{Key: fmt.Sprintf("k%d", rev), Value: []byte(strings.Repeat("v", int(rev%40))), CreateRevision: rev, ModRevision: rev, Version: 1}, Time: time.Unix(1700000000, 0)}
		if err := w.append([]store.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	written := rev

	ctx := context.Background()
	root := t.TempDir()
	runs := 0
	outcomes := map[string]int{}
	for _, seg := range []string{segmentName(1), segmentName(2)} {
		data := disk.names[seg].data
		// Every byte of the segment header and of each record's header
		// and trailer, and of the zeros just after the last record; every
		// seventh byte elsewhere.
		every := map[int]bool{}
		mark := func(from, to int) {
			for off := from; off < to; off++ {
				every[off] = true
			}
		}
		mark(0, segmentHeaderSize)
		off := segmentHeaderSize
		for {
			_, _, size, st := readRecord(data, off)
			if st != recordWhole {
				break
			}
			mark(off, off+recordHeaderSize)
			mark(off+size-recordTrailerSize, off+size)
			off += size
		}
		mark(off, off+2*recordAlign)
		for off := range data {
			if !every[off] && off%7 != 0 {
				continue
			}
			runs++
			what := fmt.Sprintf("a byte flipped at offset %d of %s", off, seg)
			d := disk.restart(0, loseAll, 0)
			d.names[seg].data[off] ^= 0xff
			dir := filepath.Join(root, fmt.Sprint(runs))
			if err := os.Mkdir(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			s, err := Open(ctx, dir, withFS(d), withSegmentSize(segSize), withoutBoltSync())
			if err != nil {
				msg := err.Error()
				if !errors.Is(err, errCorrupt) || !strings.Contains(msg, seg) || !strings.Contains(msg, "offset") || !strings.Contains(msg, "revisions") {
					t.Fatalf("%s: Open refused without naming the damage: %v", what, err)
				}
				outcomes[seg+" refused"]++
				continue
			}
			st, err := s.Status(ctx)
			if err != nil || st.Revision != written {
				t.Fatalf("%s: opened at revision %d (%v); %d were written", what, st.Revision, err, written)
			}
			ch, err := s.Changes(ctx, 1, "", int(written))
			if err != nil || int64(len(ch.Events)) != written {
				t.Fatalf("%s: %d changes, %v", what, len(ch.Events), err)
			}
			for i, ev := range ch.Events {
				if ev.KV.Key != fmt.Sprintf("k%d", i+1) || ev.Revision() != int64(i+1) {
					t.Fatalf("%s: change %d is %s at %d", what, i, ev.KV.Key, ev.Revision())
				}
			}
			if res, err := s.Put(ctx, store.Put{Key: "next"}); err != nil || res.Revision != written+1 {
				t.Fatalf("%s: the next put: %+v, %v", what, res, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			outcomes[seg+" recovered"]++
		}
	}
	t.Logf("%d revisions in 2 segments; %d flips: %v", written, runs, outcomes)
	if outcomes[segmentName(2)+" recovered"] == 0 || outcomes[segmentName(2)+" refused"] == 0 {
		t.Fatal("the newest segment's damage was never recovered from, or never refused: the test is not seeing both")
	}
}

// TestALostRecordHeaderIsRefused: a record header that reads as zeros (a
// sector the disk lost) looks like the end of the log; when whole records
// follow it, or the rest of its sector holds data, it is damage, refused.
// The records are a few to a sector; the header alone is zeroed, then
// the header and the rest of its sector.
func TestALostRecordHeaderIsRefused(t *testing.T) {
	disk := newCrashFS(0, loseAll, 0)
	w, err := openWAL(disk, WALDir, 64<<10, func([]store.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for rev := int64(1); rev <= 5; rev++ {
		offs = append(offs, w.curOff)
		ev := store.Event{Type: store.EventPut, KV: store.KeyValue{Key: fmt.Sprintf("k%d", rev), Value: bytes.Repeat([]byte("v"), 200), CreateRevision: rev, ModRevision: rev, Version: 1}}
		if err := w.append([]store.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	for i, off := range offs {
		for _, lost := range []int64{recordHeaderSize, (off+sectorSize)&^(sectorSize-1) - off} {
			if lost != recordHeaderSize && i == len(offs)-1 {
				// The newest record's sector lost from its header on is what
				// a torn write leaves: nothing tells them apart.
				continue
			}
			t.Run(fmt.Sprintf("record %d, %d bytes", i+1, lost), func(t *testing.T) {
				d := disk.restart(0, loseAll, 0)
				clear(d.names[segmentName(1)].data[off : off+lost])
				s, err := Open(context.Background(), t.TempDir(), withFS(d), withoutBoltSync())
				if err == nil {
					s.Close()
					t.Fatal("Open took a lost record header for the end of the log")
				}
				if want := fmt.Sprintf("damaged at offset %d", off); !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), want) {
					t.Fatalf("Open: %v; want %q", err, want)
				}
			})
		}
	}
}

// TestATornSegmentFollowedByEmptyOnesOpens: the previous release, after a
// torn tail, created the next segment and then deleted the torn one; a
// crash between the two (or a delete that never reached the disk) left a
// torn segment followed by an empty one, which it then refused to open
// forever. It opens: the torn record is cut, the empty segments go.
func TestATornSegmentFollowedByEmptyOnesOpens(t *testing.T) {
	disk := newCrashFS(0, loseAll, 0)
	put := func(rev int64) store.Event {
		return store.Event{Type: store.EventPut, KV: store.KeyValue{Key: fmt.Sprintf("k%d", rev), Value: []byte("v"), CreateRevision: rev, ModRevision: rev, Version: 1}}
	}
	seg := append(legacyRecord([]store.Event{put(1)}), legacyRecord([]store.Event{put(2)})...)
	torn := legacyRecord([]store.Event{put(3)})
	seg = append(seg, torn[:len(torn)-2]...)
	for name, data := range map[string][]byte{
		"0000000000000004.wal": resize(seg, 4096),
		"0000000000000005.wal": make([]byte, 4096), // created, not written
		"0000000000000006.log": nil,                // created, not allocated
	} {
		ino := &inode{data: data, durable: data}
		disk.names[name], disk.durableNames[name] = ino, ino
	}
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir, withFS(disk), withSegmentSize(4096), withoutBoltSync())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Put(ctx, store.Put{Key: "next"}); err != nil || res.Revision != 3 {
		t.Fatalf("the next put: %+v, %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := disk.ReadDir(WALDir)
	if len(names) != 1 || names[0] != segmentName(7) {
		t.Fatalf("the log holds %q; want only the new segment", names)
	}
	s, err = Open(ctx, dir, withFS(disk.restart(0, loseAll, 0)), withSegmentSize(4096), withoutBoltSync())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st, err := s.Status(ctx); err != nil || st.Revision != 3 {
		t.Fatalf("after the second open: %+v, %v", st, err)
	}
}
