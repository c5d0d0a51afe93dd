package sdk

import (
	"sync"
	"time"
)

// Connection is the client's link to the server, as its session (or,
// against an older server, its assignment stream) sees it: Up once the
// stream delivered its first message, down (with the error) when the
// stream or the registration failed. While it
// is down, the client serves what it has (the last applied snapshots, or
// the cache's) and retries with backoff.
type Connection struct {
	// Up says the session (or the assignment stream) is open and
	// delivering.
	Up bool
	// Since is when the link last changed (the client's start while it
	// never came up).
	Since time.Time
	// Err is why the link is down (nil while up, or before the first
	// attempt ended).
	Err error
}

// connState tracks the Connection and its subscribers. Only the client's
// follow goroutine changes it, so its subscribers see the changes in
// order; they run on that goroutine, outside every lock, and must not
// block.
type connState struct {
	mu   sync.Mutex
	cur  Connection
	subs map[int]func(Connection)
	next int
}

// Connection returns the client's link to the server now.
func (c *Client) Connection() Connection {
	c.conn.mu.Lock()
	defer c.conn.mu.Unlock()
	if c.conn.cur.Since.IsZero() {
		return Connection{Since: c.started}
	}
	return c.conn.cur
}

// OnConnection calls fn with every change of the link to the server (up,
// or down with its error), from the goroutine that follows the server:
// fn must return quickly. The returned stop removes fn; it may be called
// from fn, and more than once.
func (c *Client) OnConnection(fn func(Connection)) (stop func()) {
	c.conn.mu.Lock()
	defer c.conn.mu.Unlock()
	if c.conn.subs == nil {
		c.conn.subs = map[int]func(Connection){}
	}
	id := c.conn.next
	c.conn.next++
	c.conn.subs[id] = fn
	return func() {
		c.conn.mu.Lock()
		defer c.conn.mu.Unlock()
		delete(c.conn.subs, id)
	}
}

// linkChanged records the link's state; subscribers hear of a change
// (up to down, down to up), not of every failed retry.
func (c *Client) linkChanged(up bool, err error) {
	c.conn.mu.Lock()
	if c.conn.cur.Up == up && !c.conn.cur.Since.IsZero() {
		if !up {
			c.conn.cur.Err = err
		}
		c.conn.mu.Unlock()
		return
	}
	since := time.Now()
	if c.conn.cur.Since.IsZero() && !up {
		since = c.started // down since the start: it never came up
	}
	c.conn.cur = Connection{Up: up, Since: since, Err: err}
	now := c.conn.cur
	fns := make([]func(Connection), 0, len(c.conn.subs))
	for _, fn := range c.conn.subs {
		fns = append(fns, fn)
	}
	c.conn.mu.Unlock()
	for _, fn := range fns {
		fn(now)
	}
}
