package audit

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/pawlcfg/pawl/sdk/auditchain"
)

// Log is an audit log: an engine (OpenFile, OpenRedis). Its methods may be
// called concurrently; Close must be called, once no call is in flight.
type Log interface {
	// Append chains r onto the log (it sets r.Sequence and r.PrevHash) and
	// returns the record written, once it is durable. An error means the
	// record may or may not have been written.
	Append(ctx context.Context, r auditchain.Record) (auditchain.Record, error)
	// Read returns up to limit records after the cursor, in log order,
	// as stored (unchecked), each with the cursor after it.
	Read(ctx context.Context, after Cursor, limit int) ([]Entry, error)
	// Close stops the log's writer and releases its file or keys; appends
	// after it fail with ErrClosed.
	Close() error
}

var (
	// ErrClosed means the log was closed.
	ErrClosed = errors.New("audit: the log is closed")
	// ErrCursor means a cursor does not point between two records of
	// this log.
	ErrCursor = errors.New("audit: malformed cursor")
)

// Entry is a record as Read returns it, with the cursor just after it.
type Entry struct {
	auditchain.Stored
	Next Cursor
}

// Cursor is a place in a log: after the record at Position (0: before the
// first), at byte Offset of a file log (0 for Redis).
type Cursor struct {
	Position int64
	Offset   int64
}

const cursorVersion = 1

// Encode returns the cursor as an opaque URL-safe token.
func (c Cursor) Encode() string {
	b := []byte{cursorVersion}
	b = binary.AppendUvarint(b, uint64(c.Position))
	b = binary.AppendUvarint(b, uint64(c.Offset))
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor reads a token Encode wrote; anything else is ErrCursor. A
// log checks that the cursor points between two of its records.
func DecodeCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1 || b[0] != cursorVersion {
		return Cursor{}, ErrCursor
	}
	pos, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return Cursor{}, ErrCursor
	}
	off, m := binary.Uvarint(b[1+n:])
	if m <= 0 || 1+n+m != len(b) || pos > 1<<62 || off > 1<<62 {
		return Cursor{}, ErrCursor
	}
	return Cursor{Position: int64(pos), Offset: int64(off)}, nil
}

// DefaultMaxBatch is how many records one write (one fsync, or one Redis
// script) takes at most: enough that a fleet's ACKs share fsyncs, small
// enough that one batch is one modest write.
const DefaultMaxBatch = 256

// pending is one append waiting for the writer.
type pending struct {
	rec  auditchain.Record
	done chan error // buffered: the writer never waits for the caller
}

// writer serializes the appends of one log: its goroutine takes every
// append waiting, hands them to commit as one batch, and answers each.
// commit sets each record's Sequence and PrevHash; it runs on the writer's
// goroutine only, so the head it keeps needs no lock.
type writer struct {
	reqs     chan *pending // unbuffered: a send succeeds only while run takes it
	commit   func(ctx context.Context, batch []*pending) error
	maxBatch int

	ctx    context.Context // ends at stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startWriter(maxBatch int, commit func(context.Context, []*pending) error) *writer {
	w := &writer{reqs: make(chan *pending), commit: commit, maxBatch: maxBatch}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.wg.Add(1)
	go w.run()
	return w
}

// run is the writer's loop; it returns when stop is called, after
// answering the batch in hand.
func (w *writer) run() {
	defer w.wg.Done()
	batch := make([]*pending, 0, w.maxBatch)
	for {
		select {
		case <-w.ctx.Done():
			return
		case p := <-w.reqs:
			batch = append(batch[:0], p)
		}
	collect:
		for len(batch) < w.maxBatch {
			select {
			case p := <-w.reqs:
				batch = append(batch, p)
			default:
				break collect
			}
		}
		err := w.commit(w.ctx, batch)
		for _, p := range batch {
			p.done <- err
		}
	}
}

// append hands r to the writer and waits for its answer. When ctx ends
// first, the record may still be written.
func (w *writer) append(ctx context.Context, r auditchain.Record) (auditchain.Record, error) {
	p := &pending{rec: r, done: make(chan error, 1)}
	select {
	case w.reqs <- p:
	case <-w.ctx.Done():
		return auditchain.Record{}, ErrClosed
	case <-ctx.Done():
		return auditchain.Record{}, fmt.Errorf("audit: waiting to append: %w", ctx.Err())
	}
	select {
	case err := <-p.done:
		if err != nil {
			return auditchain.Record{}, err
		}
		return p.rec, nil
	case <-ctx.Done():
		return auditchain.Record{}, fmt.Errorf("audit: waiting for the append to be durable: %w", ctx.Err())
	}
}

// stop ends the writer and waits for it; it is idempotent.
func (w *writer) stop() {
	w.cancel()
	w.wg.Wait()
}

// chain sets the sequence and previous hash of each record of batch,
// after head, and returns the lines to write and the head after them.
func chain(head auditchain.Chain, batch []*pending) ([][]byte, auditchain.Chain) {
	lines := make([][]byte, len(batch))
	for i, p := range batch {
		p.rec.Sequence, p.rec.PrevHash = head.Sequence+1, head.Hash
		c := p.rec.Canonical()
		h := auditchain.Hash(c)
		lines[i] = auditchain.Line(h, c)
		head = auditchain.Chain{Sequence: p.rec.Sequence, Hash: h}
	}
	return lines, head
}
