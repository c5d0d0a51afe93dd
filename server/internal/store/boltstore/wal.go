package boltstore

import (
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

const (
	walSuffix     = ".wal"
	walHeaderSize = 8 // little-endian length, then CRC-32C of the payload
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// wal is the write-ahead log: a write group's events are appended as one
// record and synced before any writer of the group is answered; bbolt gets
// them behind it. A segment is deleted once bbolt holds every event in it,
// durably. The writer goroutine appends; the applier releases.
type wal struct {
	dir         string
	segmentSize int64

	// The current segment, owned by the writer goroutine. zeroed says it
	// was written with zeros ahead, so that a write into it allocates no
	// blocks either (on ext4 a write into space that fallocate reserved
	// still changes the extent tree, which the sync must then write).
	cur     *os.File
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

// segment is a full segment: its sequence number and newest revision.
type segment struct {
	seq  uint64
	last int64
}

func segmentName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, walSuffix) }

// openWAL opens the log in dir, calls replay with the events of every
// record it holds, oldest first, and starts a new segment for appends. A
// record cut short by a crash ends the last segment (its writers were
// never answered); anywhere else it is corruption.
func openWAL(dir string, segmentSize int64, replay func([]store.Event) error) (*wal, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("boltstore: create the log directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("boltstore: read the log directory: %w", err)
	}
	var seqs []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), walSuffix)
		if !ok {
			continue
		}
		seq, err := strconv.ParseUint(name, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("boltstore: %s in the log directory is not a segment", e.Name())
		}
		seqs = append(seqs, seq)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	if err := os.Remove(filepath.Join(dir, spareName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("boltstore: remove the old spare segment: %w", err)
	}
	w := &wal{dir: dir, segmentSize: segmentSize, spare: make(chan spareFile, 1), stopSpare: make(chan struct{})}
	for i, seq := range seqs {
		last, torn, err := replaySegment(filepath.Join(dir, segmentName(seq)), replay)
		if err != nil {
			return nil, err
		}
		if torn && i != len(seqs)-1 {
			return nil, fmt.Errorf("boltstore: log segment %s ends in a damaged record, and later segments follow: %w", segmentName(seq), errCorrupt)
		}
		w.closed = append(w.closed, segment{seq: seq, last: last})
	}
	next := uint64(1)
	if len(seqs) > 0 {
		next = seqs[len(seqs)-1] + 1
	}
	if err := w.startSegment(next, 0); err != nil {
		return nil, err
	}
	return w, nil
}

// replaySegment reads the records of one segment. torn says it ended in a
// record that is incomplete or fails its checksum.
func replaySegment(path string, replay func([]store.Event) error) (last int64, torn bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false, fmt.Errorf("boltstore: read log segment: %w", err)
	}
	for off := 0; off+walHeaderSize <= len(data); {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		if n == 0 {
			break // the space allocated ahead: the end
		}
		sum := binary.LittleEndian.Uint32(data[off+4:])
		end := off + walHeaderSize + n
		if end > len(data) || crc32.Checksum(data[off+walHeaderSize:end], walCRC) != sum {
			return last, true, nil
		}
		events, err := decodeWALRecord(data[off+walHeaderSize : end])
		if err != nil {
			return 0, false, fmt.Errorf("boltstore: log segment %s at %d: %w", filepath.Base(path), off, err)
		}
		if err := replay(events); err != nil {
			return 0, false, err
		}
		if len(events) > 0 {
			last = events[len(events)-1].Revision()
		}
		off = end
	}
	return last, false, nil
}

// startSegment creates segment seq with room for at least need bytes and
// makes it the current one.
func (w *wal) startSegment(seq uint64, need int64) error {
	size := max(w.segmentSize, need)
	path := filepath.Join(w.dir, segmentName(seq))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("boltstore: create log segment: %w", err)
	}
	if err := preallocate(f, size); err != nil {
		f.Close()
		return fmt.Errorf("boltstore: allocate log segment: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("boltstore: sync log segment: %w", err)
	}
	if err := syncDir(w.dir); err != nil {
		f.Close()
		return err
	}
	w.cur, w.curSeq, w.curOff, w.curSize, w.zeroed = f, seq, 0, size, false
	return nil
}

// prepareSpare starts the goroutine that writes the spare. close stops it.
func (w *wal) prepareSpare() {
	w.preparing = true
	w.spareWG.Add(1)
	go func() {
		defer w.spareWG.Done()
		path := filepath.Join(w.dir, spareName)
		w.spare <- spareFile{path: path, err: writeZeros(path, w.segmentSize, w.stopSpare)}
	}()
}

// writeZeros writes a file of size zero bytes and syncs it, unless stop
// closes first.
func writeZeros(path string, size int64, stop <-chan struct{}) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
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
		if _, err := f.Write(zeros[:min(int64(len(zeros)), size-off)]); err != nil {
			return err
		}
	}
	return f.Sync()
}

// useSpare makes the prepared spare segment seq, the current one.
func (w *wal) useSpare(sp spareFile, seq uint64) error {
	w.preparing = false
	path := filepath.Join(w.dir, segmentName(seq))
	if err := os.Rename(sp.path, path); err != nil {
		return fmt.Errorf("boltstore: make the spare a log segment: %w", err)
	}
	if err := syncDir(w.dir); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("boltstore: open log segment: %w", err)
	}
	w.cur, w.curSeq, w.curOff, w.curSize, w.zeroed = f, seq, 0, w.segmentSize, true
	return nil
}

// append writes events as one record and syncs it: when it returns nil,
// they survive a crash.
func (w *wal) append(events []store.Event) error {
	w.buf = encodeWALRecord(w.buf[:0], events)
	n := int64(len(w.buf))
	switch {
	case w.curOff+n+walHeaderSize > w.curSize: // keep room for a zero length after it
		if err := w.rotate(n + walHeaderSize); err != nil {
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
	if err := fdatasync(w.cur); err != nil {
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
	w.closed = append(w.closed, segment{seq: w.curSeq, last: w.curLast})
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
		if err := os.Remove(filepath.Join(w.dir, segmentName(s.seq))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("boltstore: delete log segment: %w", err)
		}
	}
	return nil
}

func (w *wal) close() error {
	if w.cur == nil {
		return nil
	}
	close(w.stopSpare)
	w.spareWG.Wait()
	_ = os.Remove(filepath.Join(w.dir, spareName))
	err := w.cur.Close()
	w.cur = nil
	return err
}

// encodeWALRecord appends the record of events to b: a header, then the
// number of events and each one's revision, length and encoding.
func encodeWALRecord(b []byte, events []store.Event) []byte {
	b = append(b, make([]byte, walHeaderSize)...)
	b = binary.AppendUvarint(b, uint64(len(events)))
	for _, ev := range events {
		enc := encodeEvent(ev)
		b = binary.AppendUvarint(b, uint64(ev.Revision()))
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	payload := b[walHeaderSize:]
	binary.LittleEndian.PutUint32(b[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(payload, walCRC))
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

// syncDir makes the creation or removal of a file in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("boltstore: open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("boltstore: sync %s: %w", dir, err)
	}
	return nil
}
