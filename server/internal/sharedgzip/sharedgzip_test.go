package sharedgzip

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func compressWith(t *testing.T, c *Cache, in []byte) []byte {
	t.Helper()
	z := &compressor{cache: c}
	var dst bytes.Buffer
	z.Reset(&dst)
	if _, err := z.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return dst.Bytes()
}

// TestOneMessageIsCompressedOnce: a message sent once is compressed and
// not kept; sent again by two hundred streams at once, it is compressed
// once more, and kept: each stream gets the standard gzip of it; a
// different message is compressed on its own.
func TestOneMessageIsCompressedOnce(t *testing.T) {
	c := NewCache(8, 1<<20)
	msg := bytes.Repeat([]byte("a watch event batch "), 500)
	var std bytes.Buffer
	w := gzip.NewWriter(&std)
	_, _ = w.Write(msg)
	_ = w.Close()
	if out := compressWith(t, c, msg); !bytes.Equal(out, std.Bytes()) {
		t.Fatal("a message sent once does not get the standard gzip")
	}
	if len(c.entries) != 0 || c.bytes != 0 {
		t.Fatalf("a message sent once is kept: %d entries, %d bytes", len(c.entries), c.bytes)
	}
	var wg sync.WaitGroup
	outs := make([][]byte, 200)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = compressWith(t, c, msg)
		}()
	}
	wg.Wait()
	for i, out := range outs {
		if !bytes.Equal(out, std.Bytes()) {
			t.Fatalf("stream %d got %d bytes that are not the standard gzip", i, len(out))
		}
	}
	if n := c.Compressed(); n != 2 {
		t.Fatalf("compressed %d times, want twice (once sent once, once when it came again)", n)
	}
	other := append(bytes.Clone(msg), '!')
	if got := gunzip(t, compressWith(t, c, other)); !bytes.Equal(got, other) {
		t.Fatal("the second message does not round-trip")
	}
	if n := c.Compressed(); n != 3 {
		t.Fatalf("compressed %d times after a second message, want 3", n)
	}
}

// TestAMessageAnotherStreamWaitedForIsKept: a stream that asks for a
// message while another compresses it waits for that compression, and
// the message is kept on its first sending: a third stream is answered
// from the cache.
func TestAMessageAnotherStreamWaitedForIsKept(t *testing.T) {
	c := NewCache(8, 1<<20)
	msg := bytes.Repeat([]byte("an assignment for every instance "), 100)
	underway, release, waiting := make(chan struct{}), make(chan struct{}), make(chan struct{})
	c.compressing = func() { close(underway); <-release }
	c.waiting = func() { close(waiting) }
	// compress is compressWith for another goroutine: it sends nil on
	// an error rather than ending its goroutine.
	compress := func(out chan<- []byte) {
		var dst bytes.Buffer
		z := &compressor{cache: c}
		z.Reset(&dst)
		_, _ = z.Write(msg)
		if z.Close() != nil {
			out <- nil
			return
		}
		out <- dst.Bytes()
	}
	first, second := make(chan []byte, 1), make(chan []byte, 1)
	go compress(first)
	go func() {
		<-underway
		compress(second)
	}()
	select {
	case <-waiting:
	case <-time.After(time.Minute):
		t.Fatal("the second stream did not wait for the first one's compression")
	}
	close(release)
	a, b := <-first, <-second
	if !bytes.Equal(a, b) || !bytes.Equal(gunzip(t, a), msg) {
		t.Fatal("the two streams got different output, or not the message's gzip")
	}
	if len(c.entries) != 1 {
		t.Fatalf("%d entries after a shared compression, want 1", len(c.entries))
	}
	compressWith(t, c, msg)
	if n := c.Compressed(); n != 1 {
		t.Fatalf("compressed %d times, want once", n)
	}
}

// TestTheCacheStaysBounded: past its entry and byte bounds the oldest
// messages go, and are compressed again when they come back.
func TestTheCacheStaysBounded(t *testing.T) {
	c := NewCache(4, 1<<20)
	for i := range 10 {
		// Twice each: a message is kept when it comes again.
		compressWith(t, c, []byte(fmt.Sprintf("message %d %s", i, bytes.Repeat([]byte("x"), 1000))))
		compressWith(t, c, []byte(fmt.Sprintf("message %d %s", i, bytes.Repeat([]byte("x"), 1000))))
	}
	if len(c.entries) != 4 || len(c.order) != 4 {
		t.Fatalf("%d entries, %d in order; want 4", len(c.entries), len(c.order))
	}
	before := c.Compressed()
	compressWith(t, c, []byte(fmt.Sprintf("message %d %s", 0, bytes.Repeat([]byte("x"), 1000))))
	if c.Compressed() != before+1 {
		t.Fatal("an evicted message was answered from the cache")
	}
	small := NewCache(100, 3000)
	for i := range 10 {
		compressWith(t, small, bytes.Repeat([]byte{byte(i)}, 1000))
		compressWith(t, small, bytes.Repeat([]byte{byte(i)}, 1000))
	}
	if len(small.entries) == 0 {
		t.Fatal("the small cache keeps nothing")
	}
	if small.bytes > 3000 {
		t.Fatalf("the cache holds %d bytes, over its 3000", small.bytes)
	}
}

// TestAKeyNotedAgainIsRemembered: a message kept and then dropped (the
// cache holds one) is noted again when it comes back; older notes
// falling out of the window of remembered keys do not forget the new
// one, and it is kept on its next sending.
func TestAKeyNotedAgainIsRemembered(t *testing.T) {
	c := NewCache(1, 1<<20) // remembers 4 keys
	msg := func(name string) []byte { return []byte(name + " " + string(bytes.Repeat([]byte("x"), 500))) }
	compressWith(t, c, msg("a"))
	compressWith(t, c, msg("a")) // kept
	compressWith(t, c, msg("c"))
	compressWith(t, c, msg("c")) // kept, "a" dropped
	compressWith(t, c, msg("a")) // noted again
	compressWith(t, c, msg("d"))
	compressWith(t, c, msg("e")) // the first note of "a" falls out of the window
	compressWith(t, c, msg("a"))
	if len(c.entries) != 1 || c.entries[keyOf(msg("a"))] == nil {
		t.Fatal(`"a", noted again and sent again, is not kept`)
	}
}
