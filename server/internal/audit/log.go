package audit

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pawlcfg/pawl/sdk/auditchain"
)

// Log is an audit log: an engine (OpenFile, OpenRedis). Its methods may be
// called concurrently; Close must be called, once no call is in flight.
type Log interface {
	// Append chains r onto the log (it sets r.Sequence and r.PrevHash) and
	// returns the record written, once it is durable. An error means the
	// record may or may not have been written.
	Append(ctx context.Context, r auditchain.Record) (auditchain.Record, error)
	// AppendAsync is Append without waiting: it queues r and returns, and
	// done is called exactly once, with what Append would return, from
	// the log's writer once r's batch is durable (or failed), or at once
	// when the log is closed or ctx has ended. done must not block: the
	// log's next batch waits for it. A caller that needs the record
	// durable before it answers hands its answer to done, and needs no
	// goroutine of its own to wait.
	AppendAsync(ctx context.Context, r auditchain.Record, done func(auditchain.Record, error))
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

// The states of a pending append. Whoever moves it out of appendQueued
// or appendTaken answers it: the writer (taking it, then once its batch
// is durable or failed), its context's end, or the writer's stop.
const (
	appendQueued int32 = iota
	appendTaken
	appendAnswered
)

// pending is one append waiting for the writer.
type pending struct {
	rec   auditchain.Record
	done  func(auditchain.Record, error)
	state atomic.Int32
	// release stops watching the appender's context (nil: it has none).
	release func() bool
}

// answer moves p from state from to answered and, if it did, calls its
// done; it reports whether it did.
func (p *pending) answer(from int32, err error) bool {
	if !p.state.CompareAndSwap(from, appendAnswered) {
		return false
	}
	if p.release != nil {
		p.release()
	}
	if err != nil {
		p.done(auditchain.Record{}, err)
	} else {
		p.done(p.rec, nil)
	}
	return true
}

// writer serializes the appends of one log: its goroutine takes the
// appends waiting (at most maxBatch), hands them to commit as one batch,
// and answers each. commit sets each record's Sequence and PrevHash; it
// runs on the writer's goroutine only, so the head it keeps needs no
// lock.
//
// The queue is a slice under mu that appenders add to without waiting,
// so that an append needs no goroutine of its own (appendAsync); what
// bounds it is the appenders: a call's handler, or a session's ACKs in
// flight.
type writer struct {
	commit   func(ctx context.Context, batch []*pending) error
	maxBatch int

	mu      sync.Mutex
	queue   []*pending
	stopped bool          // set when run returned: appends fail with ErrClosed
	wake    chan struct{} // buffered(1): a pending wake-up of run

	ctx    context.Context // ends at stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startWriter(maxBatch int, commit func(context.Context, []*pending) error) *writer {
	w := &writer{commit: commit, maxBatch: maxBatch, wake: make(chan struct{}, 1)}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.wg.Add(1)
	go w.run()
	return w
}

// run is the writer's loop; it returns when stop is called, after
// answering the batch in hand, and answers what is still queued with
// ErrClosed.
func (w *writer) run() {
	defer w.wg.Done()
	defer w.drain()
	batch := make([]*pending, 0, w.maxBatch)
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.wake:
		}
		for w.ctx.Err() == nil {
			batch = w.take(batch[:0])
			if len(batch) == 0 {
				break
			}
			err := w.commit(w.ctx, batch)
			for _, p := range batch {
				p.answer(appendTaken, err)
			}
			clear(batch)
		}
	}
}

// take moves up to maxBatch appends from the queue into batch, in order,
// skipping those whose context ended.
func (w *writer) take(batch []*pending) []*pending {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for n < len(w.queue) && len(batch) < w.maxBatch {
		p := w.queue[n]
		n++
		if p.state.CompareAndSwap(appendQueued, appendTaken) {
			batch = append(batch, p)
		}
	}
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:])
	w.queue = w.queue[:rest]
	return batch
}

// drain stops the queue and answers what it holds with ErrClosed.
func (w *writer) drain() {
	w.mu.Lock()
	w.stopped = true
	queue := w.queue
	w.queue = nil
	w.mu.Unlock()
	for _, p := range queue {
		p.answer(appendQueued, ErrClosed)
	}
}

// appendAsync queues r and returns without waiting: done is called
// exactly once, with the record as written once it is durable, or with
// the error why it may not be. done runs on the writer's goroutine (or
// on the caller's, when the log is closed or ctx has ended already, or
// on the goroutine that ends ctx) and must not block: the writer's
// next batch waits for it. When ctx ends while r waits in the queue, r
// is not written; once taken into a batch it may be written whatever ctx
// does, and done then says it is not known to be.
func (w *writer) appendAsync(ctx context.Context, r auditchain.Record, done func(auditchain.Record, error)) {
	p := &pending{rec: r, done: done}
	if err := ctx.Err(); err != nil {
		done(auditchain.Record{}, fmt.Errorf("audit: waiting to append: %w", err))
		return
	}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		done(auditchain.Record{}, ErrClosed)
		return
	}
	if ctx.Done() != nil {
		p.release = context.AfterFunc(ctx, func() {
			if !p.answer(appendQueued, fmt.Errorf("audit: waiting to append: %w", ctx.Err())) {
				p.answer(appendTaken, fmt.Errorf("audit: waiting for the append to be durable: %w", ctx.Err()))
			}
		})
	}
	w.queue = append(w.queue, p)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// append hands r to the writer and waits for its answer. When ctx ends
// first, the record may still be written.
func (w *writer) append(ctx context.Context, r auditchain.Record) (auditchain.Record, error) {
	type result struct {
		rec auditchain.Record
		err error
	}
	res := make(chan result, 1)
	w.appendAsync(ctx, r, func(rec auditchain.Record, err error) { res <- result{rec, err} })
	got := <-res
	return got.rec, got.err
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
