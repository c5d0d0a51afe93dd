package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// WALDir is the directory of the write-ahead log inside the data directory.
const WALDir = "wal"

// defaultSegmentSize is how much space a log segment takes at once. Space
// allocated ahead means an append does not grow the file, so its sync does
// not write the file's size as well.
const defaultSegmentSize = 64 << 20

// The log's format. A segment is named by its sequence number in hex and
// ends in ".log"; it starts with segmentHeader, and its records follow,
// each at a multiple of recordAlign:
//
//	header   length of the payload (u32), number of events (u32),
//	         CRC-32C of the payload (u32), CRC-32C of these 12 bytes (u32)
//	payload  the events
//	padding  zeros up to the trailer
//	trailer  CRC-32C of the payload (u32), the length inverted (u32)
//
// all little-endian, the trailer ending the record at a multiple of
// recordAlign. The rest of the segment is zeros: it was zeroed ahead, and
// a header of zeros ends the records. The header's own checksum means a
// damaged length is found before it is used; the alignment keeps each
// header inside one disk sector, so that a torn write leaves a header
// either whole or zeros; the trailer keeps the record's last sector from
// being zeros when it was written (see scanSegment).
//
// Segments of the previous format end in ".wal": no segment header, and
// records of a length (u32) and a CRC-32C of the payload (u32) followed by
// the payload, unaligned. They are read, never appended to.
const (
	segmentSuffix     = ".log"
	legacySuffix      = ".wal"
	segmentHeaderSize = 16
	recordHeaderSize  = 16
	recordTrailerSize = 8
	recordAlign       = 16
	legacyHeaderSize  = 8
	// sectorSize is the unit a disk writes whole or not at all, as etcd's
	// log assumes too: a torn append leaves some of its record's sectors
	// as they were (zeros), never part of one.
	sectorSize = 512
)

// segmentHeader starts every segment of this format: a magic string and
// the format version (2), then reserved zeros.
var segmentHeader = [segmentHeaderSize]byte{'P', 'A', 'W', 'L', 'W', 'A', 'L', 2}

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// wal is the write-ahead log: a write group's events are appended as one
// record and synced before any writer of the group is answered; bbolt gets
// them behind it. A segment is deleted once bbolt holds every event in it,
// durably. The writer goroutine appends; the applier releases.
type wal struct {
	fs          walFS
	dir         string
	segmentSize int64

	// The current segment, owned by the writer goroutine. zeroed says it
	// was written with zeros ahead, so that a write into it allocates no
	// blocks either (on ext4 a write into space that fallocate reserved
	// still changes the extent tree, which the sync must then write).
	cur     walFile
	curSeq  uint64
	curOff  int64
	curSize int64
	zeroed  bool
	buf     []byte

	// The spare: the next segment, zeroed by a goroutine while the current
	// one fills. Started once the current segment holds spareAfter bytes
	// (a quarter of a segment, at most 1 MiB), so that a store that writes
	// little writes no spare either.
	spare     chan spareFile // buffered(1): the preparing goroutine's result
	preparing bool
	stopSpare chan struct{}
	spareWG   sync.WaitGroup

	mu     sync.Mutex // guards closed and curLast
	closed []segment  // full segments, oldest first
	// curLast is the newest revision in the current segment (0: none).
	curLast int64
}

// spareFile is a prepared spare, or why there is none.
type spareFile struct {
	path string
	err  error
}

const (
	spareName  = "spare.tmp"
	spareAfter = 1 << 20
)

// segment is a full segment: its file name and newest revision (0: none).
type segment struct {
	name string
	last int64
}

func segmentName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, segmentSuffix) }

// openWAL opens the log in dir, calls replay with the events of every
// record it holds, oldest first, and makes the log ready for appends.
//
// Only the newest segment holding records can end in a record that a
// crash tore (its writers were never answered): the torn bytes are zeroed
// in place and synced, so that appends go on after the last whole record,
// and segments after it that hold nothing are deleted. Damage anywhere
// else, or a torn record that whole records follow, is refused with an
// error naming the segment, the offset and the revisions at stake. Every
// step is safe to repeat: a crash during openWAL leaves a log that the
// next openWAL recovers the same way.
func openWAL(fsys walFS, dir string, segmentSize int64, replay func([]store.Event) error) (*wal, error) {
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("boltstore: create the log directory: %w", err)
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("boltstore: read the log directory: %w", err)
	}
	type named struct {
		seq    uint64
		legacy bool
	}
	var files []named
	for _, name := range names {
		if name == spareName {
			if err := fsys.Remove(filepath.Join(dir, spareName)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("boltstore: remove the old spare segment: %w", err)
			}
			if err := fsys.SyncDir(dir); err != nil {
				return nil, err
			}
			continue
		}
		base, suffix := name, ""
		if b, ok := strings.CutSuffix(name, segmentSuffix); ok {
			base, suffix = b, segmentSuffix
		} else if b, ok := strings.CutSuffix(name, legacySuffix); ok {
			base, suffix = b, legacySuffix
		}
		if suffix == "" {
			continue
		}
		seq, err := strconv.ParseUint(base, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("boltstore: %s in the log directory is not a segment", name)
		}
		files = append(files, named{seq: seq, legacy: suffix == legacySuffix})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].seq < files[j].seq })
	for i := 1; i < len(files); i++ {
		if files[i].seq == files[i-1].seq {
			return nil, fmt.Errorf("boltstore: the log directory holds two segments numbered %x", files[i].seq)
		}
	}

	var scans []*segmentScan
	var last int64
	tail := -1 // the newest segment holding records
	for i, f := range files {
		name := segmentName(f.seq)
		if f.legacy {
			name = fmt.Sprintf("%016x%s", f.seq, legacySuffix)
		}
		data, err := fsys.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("boltstore: read log segment %s: %w", name, err)
		}
		sc, err := scanSegment(name, data, f.legacy, last, replay)
		if err != nil {
			return nil, err
		}
		sc.seq = f.seq
		if sc.last != 0 {
			last = sc.last
		}
		if !sc.empty {
			tail = i
		}
		scans = append(scans, sc)
	}
	// Only the newest segment with records may end in a torn one.
	for _, sc := range scans[:max(tail, 0)] {
		if sc.torn {
			return nil, fmt.Errorf("boltstore: log segment %s is damaged at offset %d, and later segments hold records (revisions %d to %d at stake): %w",
				sc.name, sc.end, sc.last+1, last, errCorrupt)
		}
	}

	w := &wal{fs: fsys, dir: dir, segmentSize: segmentSize, spare: make(chan spareFile, 1), stopSpare: make(chan struct{})}
	var cur *segmentScan
	if tail >= 0 {
		cur = scans[tail]
		if cur.torn {
			if err := w.cutTornTail(cur); err != nil {
				return nil, err
			}
		}
	}
	// Segments after the tail hold nothing: a crash caught their
	// creation, or a recovery by the previous release.
	for _, sc := range scans[tail+1:] {
		if err := fsys.Remove(filepath.Join(dir, sc.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("boltstore: delete empty log segment: %w", err)
		}
	}
	if tail+1 < len(scans) {
		if err := fsys.SyncDir(dir); err != nil {
			return nil, err
		}
	}
	for _, sc := range scans[:tail+1] {
		w.closed = append(w.closed, segment{name: sc.name, last: sc.last})
	}
	if cur != nil && !cur.legacy {
		// Appends go on in the newest segment, after its last record.
		f, err := fsys.OpenFile(filepath.Join(dir, cur.name), os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("boltstore: open log segment: %w", err)
		}
		w.closed = w.closed[:len(w.closed)-1]
		w.cur, w.curSeq, w.curOff, w.curSize, w.curLast = f, cur.seq, int64(cur.end), int64(cur.size), cur.last
		return w, nil
	}
	next := uint64(1)
	if len(files) > 0 {
		next = files[len(files)-1].seq + 1
	}
	if err := w.startSegment(next, 0); err != nil {
		return nil, err
	}
	return w, nil
}

// segmentScan is what scanSegment found in a segment.
type segmentScan struct {
	name   string
	seq    uint64
	legacy bool
	size   int   // the file's length
	end    int   // the offset after the last whole record
	last   int64 // the newest revision in it (0: none)
	// empty says the segment holds no byte but zeros (or its header).
	empty bool
	// torn says a crash tore the record at end: the bytes from end to
	// dirty are to be zeroed.
	torn  bool
	dirty int
}

// scanSegment reads the records of one segment, calling replay with each
// record's events, and tells a torn end (a crash during an append, whose
// writers were never answered) from damage, which it returns as an error.
// prev is the newest revision of the segments before.
//
// After the last whole record the segment must be zeros, except for a
// record a crash tore: its header either whole or zeros (a header never
// spans two sectors), and, with a whole header, one of its sectors still
// zeros (its first holds the header and its last the trailer, neither
// zeros once written). Whatever else follows is damage: a record that
// fails its checksums whole, or whole records after a bad one (which
// would be acknowledged writes, silently dropped if it were taken as the
// end).
func scanSegment(name string, data []byte, legacy bool, prev int64, replay func([]store.Event) error) (*segmentScan, error) {
	sc := &segmentScan{name: name, legacy: legacy, size: len(data), last: prev}
	if isZero(data) {
		sc.empty, sc.last = true, 0
		return sc, nil
	}
	damaged := func(off int, what string, from, to int64) error {
		stake := fmt.Sprintf("revisions from %d on", from)
		if to >= from {
			stake = fmt.Sprintf("revisions %d to %d", from, to)
		}
		return fmt.Errorf("boltstore: log segment %s is damaged at offset %d: %s; %s, acknowledged or not, are at stake (restore the data directory from a backup): %w",
			name, off, what, stake, errCorrupt)
	}
	deliver := func(off int, payload []byte, count int) error {
		events, err := decodeWALRecord(payload)
		if err == nil && count >= 0 && len(events) != count {
			err = errCorrupt
		}
		if err != nil {
			return damaged(off, fmt.Sprintf("a record that passes its checksum does not decode (%v)", err), sc.last+1, -1)
		}
		if err := replay(events); err != nil {
			return err
		}
		if len(events) > 0 {
			sc.last = events[len(events)-1].Revision()
		}
		return nil
	}

	if legacy {
		// The previous format: a record cut short or failing its checksum
		// ends the segment, as that release read it.
		off := 0
		for off+legacyHeaderSize <= len(data) {
			n := int(binary.LittleEndian.Uint32(data[off:]))
			end := off + legacyHeaderSize + n
			if n == 0 || end > len(data) || crc32.Checksum(data[off+legacyHeaderSize:end], walCRC) != binary.LittleEndian.Uint32(data[off+4:]) {
				break
			}
			if err := deliver(off, data[off+legacyHeaderSize:end], -1); err != nil {
				return nil, err
			}
			off = end
		}
		sc.end = off
		if z := lastNonZero(data[off:]); z >= 0 {
			sc.torn, sc.dirty = true, off+z+1
		}
		return sc, nil
	}

	if len(data) < segmentHeaderSize || !bytes.Equal(data[:segmentHeaderSize], segmentHeader[:]) {
		// The header was synced before any record was written.
		_, to := wholeRecordsAfter(data[:lastNonZero(data)+1], segmentHeaderSize)
		return nil, damaged(0, "the segment header is not this format's", prev+1, to)
	}
	off := segmentHeaderSize
	var st recordStatus
	var payload []byte
	var count, size int
	for {
		payload, count, size, st = readRecord(data, off)
		if st != recordWhole {
			break
		}
		if err := deliver(off, payload, count); err != nil {
			return nil, err
		}
		off += size
	}
	sc.end = off
	z := lastNonZero(data[off:])
	if z < 0 {
		return sc, nil // the end: zeros
	}
	// A whole record ends in its trailer, not zeros: none starts past the
	// last byte that is not zero.
	if from, to := wholeRecordsAfter(data[:off+z+1], off+recordAlign); from != 0 {
		return nil, damaged(off, "the record there fails its checksum and whole records follow it", sc.last+1, to)
	}
	switch st {
	case recordEnd:
		// A header of zeros, and something after it: a torn write left it
		// only if the header's whole sector was never written.
		if sectorEnd := (off + sectorSize) &^ (sectorSize - 1); !isZero(data[off:min(sectorEnd, len(data))]) {
			return nil, damaged(off, "a record header is zeros and the rest of its sector is not (a torn write leaves a sector whole or as it was)", sc.last+1, -1)
		}
	case recordBadHeader:
		return nil, damaged(off, "a record header fails its checksum (a torn write leaves a header whole or zeros)", sc.last+1, -1)
	case recordBadBody:
		if !hasZeroSector(data, off, off+size) {
			return nil, damaged(off, "a record written whole fails its checksum", sc.last+1, sc.last+int64(count))
		}
	}
	// A torn append: a header of zeros with some of its payload after
	// it, a record running past the end of the file, or one with a
	// sector never written.
	sc.torn, sc.dirty = true, off+z+1
	return sc, nil
}

type recordStatus int

const (
	recordWhole     recordStatus = iota
	recordEnd                    // a header of zeros
	recordBadHeader              // a header failing its checksum
	recordPastEnd                // a whole header, the record longer than the file
	recordBadBody                // a whole header, the payload or trailer failing
)

// readRecord reads the record at off: its payload, number of events and
// size with padding and trailer.
func readRecord(data []byte, off int) (payload []byte, count, size int, st recordStatus) {
	if off+recordHeaderSize > len(data) {
		if isZero(data[off:]) {
			return nil, 0, 0, recordEnd
		}
		return nil, 0, 0, recordPastEnd
	}
	h := data[off : off+recordHeaderSize]
	if isZero(h) {
		return nil, 0, 0, recordEnd
	}
	le := binary.LittleEndian
	if crc32.Checksum(h[:12], walCRC) != le.Uint32(h[12:]) || le.Uint32(h[0:]) == 0 {
		return nil, 0, 0, recordBadHeader
	}
	n, count, sum := int(le.Uint32(h[0:])), int(le.Uint32(h[4:])), le.Uint32(h[8:])
	size = recordSize(n)
	if off+size > len(data) {
		return nil, count, size, recordPastEnd
	}
	payload = data[off+recordHeaderSize : off+recordHeaderSize+n]
	t := data[off+size-recordTrailerSize : off+size]
	if crc32.Checksum(payload, walCRC) != sum || le.Uint32(t[0:]) != sum || le.Uint32(t[4:]) != ^uint32(n) {
		return nil, count, size, recordBadBody
	}
	return payload, count, size, recordWhole
}

// wholeRecordsAfter looks for whole records at the aligned offsets from
// off on, and returns the first and last revisions they hold (0 and 0:
// none).
func wholeRecordsAfter(data []byte, off int) (from, to int64) {
	for off = (off + recordAlign - 1) &^ (recordAlign - 1); off+recordHeaderSize <= len(data); off += recordAlign {
		payload, _, _, st := readRecord(data, off)
		if st != recordWhole {
			continue
		}
		events, err := decodeWALRecord(payload)
		if err != nil || len(events) == 0 {
			continue
		}
		if from == 0 {
			from = events[0].Revision()
		}
		to = max(to, events[len(events)-1].Revision())
	}
	return from, to
}

// hasZeroSector says whether a disk sector of data[from:to] (the part of
// it inside that range) is all zeros.
func hasZeroSector(data []byte, from, to int) bool {
	to = min(to, len(data))
	for s := from &^ (sectorSize - 1); s < to; s += sectorSize {
		if isZero(data[max(s, from):min(s+sectorSize, to)]) {
			return true
		}
	}
	return false
}

func isZero(b []byte) bool { return lastNonZero(b) < 0 }

// lastNonZero returns the offset of the last byte of b that is not zero,
// or -1. It compares whole chunks first: a segment is mostly zeros.
func lastNonZero(b []byte) int {
	for end := len(b); end > 0; {
		start := max(0, end-len(zeroChunk))
		if !bytes.Equal(b[start:end], zeroChunk[:end-start]) {
			for i := end - 1; i >= start; i-- {
				if b[i] != 0 {
					return i
				}
			}
		}
		end = start
	}
	return -1
}

var zeroChunk [64 << 10]byte

// cutTornTail zeroes what a crash left of a torn record at the end of
// segment sc and syncs it: the segment then ends where its last whole
// record does, and appends go on from there. Repeating it is harmless.
func (w *wal) cutTornTail(sc *segmentScan) error {
	f, err := w.fs.OpenFile(filepath.Join(w.dir, sc.name), os.O_RDWR)
	if err != nil {
		return fmt.Errorf("boltstore: open log segment %s to cut its torn end: %w", sc.name, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, sc.dirty-sc.end), int64(sc.end)); err != nil {
		return fmt.Errorf("boltstore: cut the torn end of log segment %s: %w", sc.name, err)
	}
	if err := f.DataSync(); err != nil {
		return fmt.Errorf("boltstore: sync log segment %s: %w", sc.name, err)
	}
	sc.torn = false
	return nil
}

// startSegment creates segment seq with room for at least need bytes and
// makes it the current one.
func (w *wal) startSegment(seq uint64, need int64) error {
	size := max(w.segmentSize, need)
	name := segmentName(seq)
	f, err := w.fs.OpenFile(filepath.Join(w.dir, name), os.O_CREATE|os.O_EXCL|os.O_RDWR)
	if err != nil {
		return fmt.Errorf("boltstore: create log segment: %w", err)
	}
	if err := f.Allocate(size); err != nil {
		f.Close()
		return fmt.Errorf("boltstore: allocate log segment: %w", err)
	}
	if _, err := f.WriteAt(segmentHeader[:], 0); err != nil {
		f.Close()
		return fmt.Errorf("boltstore: write log segment header: %w", err)
	}
	// The header is durable before any record is written after it: a
	// segment with records and no header is damage, not a torn write.
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("boltstore: sync log segment: %w", err)
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		f.Close()
		return err
	}
	w.cur, w.curSeq, w.curOff, w.curSize, w.zeroed = f, seq, segmentHeaderSize, size, false
	return nil
}

// prepareSpare starts the goroutine that writes the spare. close stops it.
func (w *wal) prepareSpare() {
	w.preparing = true
	w.spareWG.Add(1)
	go func() {
		defer w.spareWG.Done()
		path := filepath.Join(w.dir, spareName)
		w.spare <- spareFile{path: path, err: writeSpare(w.fs, path, w.segmentSize, w.stopSpare)}
	}()
}

// writeSpare writes a segment header and zeros up to size into a new file
// and syncs it, unless stop closes first.
func writeSpare(fsys walFS, path string, size int64, stop <-chan struct{}) error {
	f, err := fsys.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		select {
		case <-stop:
			return errors.New("stopped")
		default:
		}
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off); err != nil {
			return err
		}
	}
	if _, err := f.WriteAt(segmentHeader[:], 0); err != nil {
		return err
	}
	// Durable before the rename makes it a segment, for the same reason as
	// in startSegment.
	return f.Sync()
}

// useSpare makes the prepared spare segment seq, the current one.
func (w *wal) useSpare(sp spareFile, seq uint64) error {
	w.preparing = false
	path := filepath.Join(w.dir, segmentName(seq))
	if err := w.fs.Rename(sp.path, path); err != nil {
		return fmt.Errorf("boltstore: make the spare a log segment: %w", err)
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		return err
	}
	f, err := w.fs.OpenFile(path, os.O_RDWR)
	if err != nil {
		return fmt.Errorf("boltstore: open log segment: %w", err)
	}
	w.cur, w.curSeq, w.curOff, w.curSize, w.zeroed = f, seq, segmentHeaderSize, w.segmentSize, true
	return nil
}

// append writes events as one record and syncs it: when it returns nil,
// they survive a crash.
func (w *wal) append(events []store.Event) error {
	w.buf = encodeWALRecord(w.buf[:0], events)
	n := int64(len(w.buf))
	switch {
	case w.curOff+n > w.curSize:
		if err := w.rotate(n + segmentHeaderSize); err != nil {
			return err
		}
	case !w.zeroed && w.preparing && len(w.spare) > 0:
		// The spare is ready: leave a segment that was not zeroed early.
		if err := w.rotate(0); err != nil {
			return err
		}
	}
	if !w.preparing && w.curOff >= min(spareAfter, w.segmentSize/4) {
		w.prepareSpare()
	}
	if _, err := w.cur.WriteAt(w.buf, w.curOff); err != nil {
		return fmt.Errorf("boltstore: write the log: %w", err)
	}
	if err := w.cur.DataSync(); err != nil {
		return fmt.Errorf("boltstore: sync the log: %w", err)
	}
	w.curOff += n
	w.mu.Lock()
	w.curLast = events[len(events)-1].Revision()
	w.mu.Unlock()
	return nil
}

// rotate closes the current segment, full, and starts the next.
func (w *wal) rotate(need int64) error {
	if err := w.cur.Close(); err != nil {
		return fmt.Errorf("boltstore: close log segment: %w", err)
	}
	w.mu.Lock()
	w.closed = append(w.closed, segment{name: segmentName(w.curSeq), last: w.curLast})
	w.curLast = 0
	w.mu.Unlock()
	next := w.curSeq + 1
	if w.preparing && need <= w.segmentSize {
		if sp := <-w.spare; sp.err == nil {
			return w.useSpare(sp, next)
		}
		w.preparing = false // no spare: allocate the segment here
	}
	return w.startSegment(next, need)
}

// release deletes the full segments whose events bbolt holds durably, up
// to revision applied.
func (w *wal) release(applied int64) error {
	w.mu.Lock()
	var drop []segment
	for len(w.closed) > 0 && w.closed[0].last <= applied {
		drop = append(drop, w.closed[0])
		w.closed = w.closed[1:]
	}
	w.mu.Unlock()
	for _, s := range drop {
		if err := w.fs.Remove(filepath.Join(w.dir, s.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("boltstore: delete log segment: %w", err)
		}
	}
	if len(drop) > 0 {
		return w.fs.SyncDir(w.dir)
	}
	return nil
}

func (w *wal) close() error {
	if w.cur == nil {
		return nil
	}
	close(w.stopSpare)
	w.spareWG.Wait()
	if err := w.fs.Remove(filepath.Join(w.dir, spareName)); err == nil {
		_ = w.fs.SyncDir(w.dir)
	}
	err := w.cur.Close()
	w.cur = nil
	return err
}

// recordSize is the size of a record of an n-byte payload, with its
// header, padding and trailer.
func recordSize(n int) int {
	return (recordHeaderSize + n + recordTrailerSize + recordAlign - 1) &^ (recordAlign - 1)
}

// encodeWALRecord appends the record of events to b (see the format
// above); the payload is the number of events, then each one's revision,
// length and encoding.
func encodeWALRecord(b []byte, events []store.Event) []byte {
	start := len(b)
	b = append(b, make([]byte, recordHeaderSize)...)
	b = binary.AppendUvarint(b, uint64(len(events)))
	for _, ev := range events {
		b = binary.AppendUvarint(b, uint64(ev.Revision()))
		b = binary.AppendUvarint(b, uint64(eventLen(ev)))
		b = appendEvent(b, ev)
	}
	n := len(b) - start - recordHeaderSize
	b = append(b, make([]byte, recordSize(n)-recordHeaderSize-n)...)
	rec := b[start:]
	sum := crc32.Checksum(rec[recordHeaderSize:recordHeaderSize+n], walCRC)
	le := binary.LittleEndian
	le.PutUint32(rec[0:], uint32(n))
	le.PutUint32(rec[4:], uint32(len(events)))
	le.PutUint32(rec[8:], sum)
	le.PutUint32(rec[12:], crc32.Checksum(rec[:12], walCRC))
	le.PutUint32(rec[len(rec)-8:], sum)
	le.PutUint32(rec[len(rec)-4:], ^uint32(n))
	return b
}

func decodeWALRecord(b []byte) ([]store.Event, error) {
	count, b, err := uvarint(b)
	if err != nil {
		return nil, err
	}
	if count > uint64(len(b)) {
		return nil, errCorrupt
	}
	events := make([]store.Event, 0, count)
	for range count {
		var rev, n uint64
		if rev, b, err = uvarint(b); err != nil {
			return nil, err
		}
		if n, b, err = uvarint(b); err != nil {
			return nil, err
		}
		if n > uint64(len(b)) {
			return nil, errCorrupt
		}
		ev, err := decodeEvent(int64(rev), b[:n])
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
		b = b[n:]
	}
	if len(b) != 0 {
		return nil, errCorrupt
	}
	return events, nil
}
