package audit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/pawlcfg/pawl/internal/atomicfile"
	"github.com/pawlcfg/pawl/sdk/auditchain"
)

// FileName is the name of the audit log in the embedded store's data
// directory.
const FileName = "audit.log"

// File is the audit log of the embedded store: a file of lines. Create it
// with OpenFile.
type File struct {
	path string
	f    *os.File
	w    *writer
	// head is the last record written; only the writer's goroutine reads
	// or writes it after OpenFile.
	head auditchain.Chain
	// failed, once set by the writer, fails every later append: a write or
	// fsync that failed left the file in a state only a reopen recovers.
	failed atomic.Pointer[error]
	// size is how many bytes are durable: readers read no further, so they
	// never see a line still being written.
	size atomic.Int64
	// truncated is how many bytes of a torn last line OpenFile removed.
	truncated int64
}

var _ Log = (*File)(nil)

// Option configures OpenFile and OpenRedis.
type Option func(*options)

type options struct{ maxBatch int }

// WithMaxBatch sets how many records one write takes at most (default
// DefaultMaxBatch); 1 writes (and fsyncs) each record alone.
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = n } }

func buildOptions(opts []Option) (options, error) {
	o := options{maxBatch: DefaultMaxBatch}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxBatch < 1 || o.maxBatch > 4096 {
		return o, fmt.Errorf("audit: WithMaxBatch(%d): must be 1 to 4096", o.maxBatch)
	}
	return o, nil
}

// OpenFile opens (or creates) the audit log at path. A torn last line (a
// crash in the middle of a write, never acknowledged) is cut off; the last
// whole record must match its hash, or OpenFile refuses the file (it was
// edited or damaged: check it with pawl audit verify --file, and move it
// aside to start a new chain).
func OpenFile(path string, opts ...Option) (*File, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	l := &File{path: path, f: f}
	if errors.Is(statErr, os.ErrNotExist) {
		// The new file's name must survive a crash as well as its lines.
		if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	if err := l.recover(); err != nil {
		_ = f.Close()
		return nil, err
	}
	l.w = startWriter(o.maxBatch, l.commit)
	return l, nil
}

// Truncated reports how many bytes of a torn last line OpenFile removed.
func (l *File) Truncated() int64 { return l.truncated }

// Head returns the sequence and hash of the last record written when
// OpenFile returned.
func (l *File) Head() auditchain.Chain { return l.head }

// recover cuts a torn last line off and reads the head from the last
// whole line.
func (l *File) recover() error {
	st, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("audit: stat %s: %w", l.path, err)
	}
	size := st.Size()
	end, err := lastNewline(l.f, size)
	if err != nil {
		return err
	}
	if end+1 != size { // bytes after the last newline: a torn write
		if err := l.f.Truncate(end + 1); err != nil {
			return fmt.Errorf("audit: cut the torn last line of %s: %w", l.path, err)
		}
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("audit: sync %s: %w", l.path, err)
		}
		l.truncated, size = size-(end+1), end+1
	}
	l.size.Store(size)
	if size == 0 {
		return nil
	}
	start, err := lastNewline(l.f, size-1)
	if err != nil {
		return err
	}
	b := make([]byte, size-1-(start+1))
	if _, err := l.f.ReadAt(b, start+1); err != nil {
		return fmt.Errorf("audit: read the last record of %s: %w", l.path, err)
	}
	s := auditchain.ParseLine(0, b)
	r, err := auditchain.Decode(s.Canonical)
	if err != nil || auditchain.Hash(s.Canonical) != s.Hash {
		return fmt.Errorf("audit: the last record of %s does not match its hash: the log was edited or damaged; "+
			"check it with pawl audit verify --file and move it aside to start a new chain", l.path)
	}
	l.head = auditchain.Chain{Sequence: r.Sequence, Hash: s.Hash}
	return nil
}

// lastNewline returns the offset of the last '\n' before offset end, or
// -1 when there is none.
func lastNewline(f *os.File, end int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end > 0 {
		n := min(int64(len(buf)), end)
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return 0, fmt.Errorf("audit: read %s: %w", f.Name(), err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i), nil
		}
		end -= n
	}
	return -1, nil
}

// Append implements Log.
func (l *File) Append(ctx context.Context, r auditchain.Record) (auditchain.Record, error) {
	return l.w.append(ctx, r)
}

// AppendAsync implements Log.
func (l *File) AppendAsync(ctx context.Context, r auditchain.Record, done func(auditchain.Record, error)) {
	l.w.appendAsync(ctx, r, done)
}

// commit writes a batch with one write and one fsync. It runs on the
// writer's goroutine.
func (l *File) commit(_ context.Context, batch []*pending) error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	lines, head := chain(l.head, batch)
	var buf []byte
	for _, b := range lines {
		buf = append(append(buf, b...), '\n')
	}
	_, err := l.f.Write(buf)
	if err == nil {
		err = fdatasync(l.f)
	}
	if err != nil {
		err = fmt.Errorf("audit: write %s: %w (appends fail until pawld restarts and recovers the file)", l.path, err)
		l.failed.Store(&err)
		return err
	}
	l.head = head
	l.size.Add(int64(len(buf)))
	return nil
}

// Read implements Log.
func (l *File) Read(ctx context.Context, after Cursor, limit int) ([]Entry, error) {
	size := l.size.Load()
	if after.Offset > size || after.Position < 0 || (after.Offset == 0) != (after.Position == 0) {
		return nil, ErrCursor
	}
	if after.Offset > 0 {
		var b [1]byte
		if _, err := l.f.ReadAt(b[:], after.Offset-1); err != nil || b[0] != '\n' {
			return nil, ErrCursor
		}
	}
	br := bufio.NewReaderSize(io.NewSectionReader(l.f, after.Offset, size-after.Offset), 64<<10)
	var out []Entry
	for len(out) < limit {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // the durable size ends with a newline: nothing is torn
		}
		if err != nil {
			return nil, fmt.Errorf("audit: read %s: %w", l.path, err)
		}
		after = Cursor{Position: after.Position + 1, Offset: after.Offset + int64(len(b))}
		out = append(out, Entry{Stored: auditchain.ParseLine(after.Position, b[:len(b)-1]), Next: after})
	}
	return out, nil
}

// Close implements Log.
func (l *File) Close() error {
	l.w.stop()
	if err := l.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("audit: close %s: %w", l.path, err)
	}
	return nil
}
