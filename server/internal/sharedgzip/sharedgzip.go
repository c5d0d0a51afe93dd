package sharedgzip

import (
	"bytes"
	"compress/gzip"
	"io"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/cespare/xxhash/v2"
)

// Name is the compression's name in Connect, gRPC and gRPC-Web.
const Name = "gzip"

// Cache is what the compressors of one handler share. Its zero value is
// not usable; create one with NewCache.
type Cache struct {
	maxEntries int
	maxBytes   int

	mu       sync.Mutex
	entries  map[uint64]*entry
	order    []uint64 // oldest first
	bytes    int
	inflight map[uint64]*flight
	// seen are the keys of messages compressed and not kept (no other
	// stream asked for them meanwhile), each with the number of its
	// noting; seenOrder has them oldest first, a key that was kept since
	// with a number seen no longer has. A message is kept when it comes
	// again.
	seen      map[uint64]uint64
	seenOrder []seenKey
	notes     uint64
	pool      sync.Pool // of *gzip.Writer

	// Test hooks, nil but in tests: compressing runs before a message is
	// compressed, waiting when a stream waits for another's compression.
	compressing, waiting func()

	compressed atomic.Int64 // messages compressed (not answered from the cache)
}

// Compressed counts the messages the cache compressed itself, rather
// than answered from what it kept.
func (c *Cache) Compressed() int64 { return c.compressed.Load() }

type entry struct {
	in, out []byte
}

type seenKey struct{ key, note uint64 }

type flight struct {
	in   []byte
	done chan struct{}
	out  []byte
	// shared is set (under Cache.mu) when another stream waits for out.
	shared bool
}

// NewCache returns a cache of up to maxEntries messages and maxBytes of
// messages and output together. It keeps a message that several streams
// send: one that another stream asked for while it was compressed, or
// one that comes again while the cache remembers its key (the last
// 4*maxEntries it did not keep). A message sent once, such as the answer
// to a unary call, is compressed and not kept.
func NewCache(maxEntries, maxBytes int) *Cache {
	return &Cache{maxEntries: maxEntries, maxBytes: maxBytes, entries: map[uint64]*entry{}, inflight: map[uint64]*flight{}, seen: map[uint64]uint64{}}
}

// Compressor returns a compressor that compresses through the cache:
// give it to a handler as its gzip compressor (connect.WithCompression,
// with any gzip decompressor).
func (c *Cache) Compressor() connect.Compressor { return &compressor{cache: c} }

// compress returns the gzip of in, from the cache when it has it.
func (c *Cache) compress(in []byte) ([]byte, error) {
	key := keyOf(in)
	c.mu.Lock()
	if e, ok := c.entries[key]; ok && bytes.Equal(e.in, in) {
		c.mu.Unlock()
		return e.out, nil
	}
	if f, ok := c.inflight[key]; ok && bytes.Equal(f.in, in) {
		f.shared = true
		c.mu.Unlock()
		if c.waiting != nil {
			c.waiting()
		}
		<-f.done
		if f.out != nil {
			return f.out, nil
		}
		return c.gzip(in) // the first one failed: do it here
	}
	f := &flight{in: bytes.Clone(in), done: make(chan struct{})}
	c.inflight[key] = f
	c.mu.Unlock()

	if c.compressing != nil {
		c.compressing()
	}
	out, err := c.gzip(in)
	c.mu.Lock()
	delete(c.inflight, key)
	if err == nil {
		f.out = out
		if _, again := c.seen[key]; again || f.shared {
			delete(c.seen, key)
			c.addLocked(key, &entry{in: f.in, out: out})
		} else {
			c.noteLocked(key)
		}
	}
	c.mu.Unlock()
	close(f.done)
	return out, err
}

// keyOf is a message's key in the cache (messages with the same key are
// compared byte for byte).
func keyOf(in []byte) uint64 { return xxhash.Sum64(in) ^ uint64(len(in)) }

// addLocked keeps e, dropping the oldest entries past the bounds.
func (c *Cache) addLocked(key uint64, e *entry) {
	size := len(e.in) + len(e.out)
	if size > c.maxBytes {
		return
	}
	if old, ok := c.entries[key]; ok {
		c.bytes -= len(old.in) + len(old.out)
	} else {
		c.order = append(c.order, key)
	}
	c.entries[key] = e
	c.bytes += size
	for len(c.order) > c.maxEntries || c.bytes > c.maxBytes {
		oldest := c.order[0]
		c.order = c.order[1:]
		if old, ok := c.entries[oldest]; ok {
			c.bytes -= len(old.in) + len(old.out)
			delete(c.entries, oldest)
		}
	}
}

// noteLocked remembers the key of a message compressed and not kept,
// forgetting the oldest past 4*maxEntries.
func (c *Cache) noteLocked(key uint64) {
	if _, ok := c.seen[key]; ok {
		return
	}
	c.notes++
	c.seen[key] = c.notes
	c.seenOrder = append(c.seenOrder, seenKey{key: key, note: c.notes})
	for len(c.seenOrder) > 4*c.maxEntries {
		oldest := c.seenOrder[0]
		c.seenOrder = c.seenOrder[1:]
		if c.seen[oldest.key] == oldest.note {
			delete(c.seen, oldest.key)
		}
	}
}

func (c *Cache) gzip(in []byte) ([]byte, error) {
	c.compressed.Add(1)
	var buf bytes.Buffer
	buf.Grow(len(in)/4 + 64)
	w, _ := c.pool.Get().(*gzip.Writer)
	if w == nil {
		w = gzip.NewWriter(&buf)
	} else {
		w.Reset(&buf)
	}
	defer c.pool.Put(w)
	if _, err := w.Write(in); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// compressor collects one message and, on Close, writes its gzip.
type compressor struct {
	cache *Cache
	dst   io.Writer
	buf   []byte
}

func (z *compressor) Write(p []byte) (int, error) {
	z.buf = append(z.buf, p...)
	return len(p), nil
}

func (z *compressor) Close() error {
	if z.dst == nil {
		return nil
	}
	out, err := z.cache.compress(z.buf)
	if err != nil {
		return err
	}
	_, err = z.dst.Write(out)
	z.dst = nil
	return err
}

func (z *compressor) Reset(dst io.Writer) {
	z.dst = dst
	if cap(z.buf) > 1<<20 {
		z.buf = nil // a pooled compressor does not keep a large buffer
	}
	z.buf = z.buf[:0]
}
