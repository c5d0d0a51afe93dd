package sdk

import (
	"context"
	"sync"
	"sync/atomic"
)

// subscriber is one OnChange: fn is called with each snapshot of config
// (every config's, when empty) until stopped.
type subscriber struct {
	config  string
	fn      func(*Snapshot)
	stopped atomic.Bool
}

// note is one swap to deliver: the snapshot, and the subscribers that
// were registered for it when it was swapped in.
type note struct {
	s  *Snapshot
	to []*subscriber
}

// notifier calls subscribers on a goroutine of its own, outside every
// lock of the client, one call at a time, in the order of the swaps: a
// callback may read the client, stop itself or another subscriber, pin,
// or Close the client, and a slow callback delays the next callbacks, not
// the applies.
type notifier struct {
	mu      sync.Mutex
	queue   []note
	closed  bool
	wake    chan struct{} // buffered 1: there is something to deliver
	done    chan struct{} // closed when the goroutine has returned
	started bool
	// calling is set while a callback runs: Close does not wait for the
	// goroutine then (the callback may be the one calling Close).
	calling atomic.Bool
	// shut is closed, readable without mu: no callback starts once set.
	shut atomic.Bool
}

func newNotifier() *notifier {
	return &notifier{wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// start starts the goroutine that delivers what was posted, at the first
// subscriber (a client without subscribers has no such goroutine).
func (n *notifier) start() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started || n.closed {
		return
	}
	n.started = true
	go n.run()
}

// post queues s for the subscribers to; it never blocks.
func (n *notifier) post(s *Snapshot, to []*subscriber) {
	if len(to) == 0 {
		return
	}
	n.mu.Lock()
	if !n.closed {
		n.queue = append(n.queue, note{s: s, to: to})
	}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) run() {
	defer close(n.done)
	for range n.wake {
		for {
			n.mu.Lock()
			if n.closed {
				n.mu.Unlock()
				return
			}
			if len(n.queue) == 0 {
				n.mu.Unlock()
				break
			}
			next := n.queue[0]
			n.queue[0] = note{}
			n.queue = n.queue[1:]
			n.mu.Unlock()
			for _, sub := range next.to {
				if sub.stopped.Load() || n.shut.Load() {
					continue
				}
				n.calling.Store(true)
				sub.fn(next.s)
				n.calling.Store(false)
			}
		}
	}
}

// close drops what was not delivered and ends the goroutine, waiting for
// it unless a callback is running (it may be the caller).
func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	n.shut.Store(true)
	n.queue = nil
	started := n.started
	n.mu.Unlock()
	if !started {
		return
	}
	select {
	case n.wake <- struct{}{}:
	default:
	}
	if !n.calling.Load() {
		<-n.done
	}
}

// OnChange calls fn with every snapshot of config id swapped in from now
// on (every config's, for an empty id), in order. Callbacks run on one
// goroutine of the client's, outside its locks, one at a time: fn may
// read the client, pin, stop itself or any subscriber, and even Close the
// client; a slow fn delays the callbacks after it, never an apply. The
// returned function stops the calls: no call starts after it returns (a
// call already running finishes). It is idempotent, and may be called
// from fn itself. Close stops every subscriber.
func (c *Client) OnChange(id string, fn func(*Snapshot)) (stop func()) {
	sub := &subscriber{config: id, fn: fn}
	c.mu.Lock()
	n := c.nextSub
	c.nextSub++
	c.subs[n] = sub
	c.mu.Unlock()
	c.notes.start()
	return func() {
		sub.stopped.Store(true)
		c.mu.Lock()
		delete(c.subs, n)
		c.mu.Unlock()
	}
}

// Changes returns a channel that receives the newest snapshot of config id
// each time one is swapped in from now on; a slow reader misses
// intermediate ones but always gets the newest. The channel is closed by
// the returned function (idempotent) or by Close, so a range over it
// ends. Watch is the same bounded by a context, starting with the
// current snapshot.
func (c *Client) Changes(id string) (<-chan *Snapshot, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	return c.watchChannel(ctx, id, false), cancel
}

// Watch returns a channel that receives the applied snapshot of config id
// (the current one first, when there is one) and then each newer one
// swapped in, like an etcd watch channel. Delivery is latest-wins: the
// channel holds one snapshot, and a reader slower than the swaps misses
// intermediate generations but always receives the newest. The channel is
// closed when ctx ends or the client closes, so
//
//	for s := range client.Watch(ctx, "routing") { ... }
//
// ends with either. Watch on a closed client returns a closed channel.
func (c *Client) Watch(ctx context.Context, id string) <-chan *Snapshot {
	return c.watchChannel(ctx, id, true)
}

// watchChan is a latest-wins channel of snapshots, closed once.
type watchChan struct {
	mu     sync.Mutex
	ch     chan *Snapshot
	closed bool
}

// offer replaces what the reader has not taken yet with s.
func (w *watchChan) offer(s *Snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	select {
	case <-w.ch:
	default:
	}
	w.ch <- s // never blocks: offer is the only sender, under mu
}

func (w *watchChan) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
}

func (c *Client) watchChannel(ctx context.Context, id string, current bool) <-chan *Snapshot {
	w := &watchChan{ch: make(chan *Snapshot, 1)}
	sub := &subscriber{config: id, fn: w.offer}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		w.close()
		return w.ch
	}
	n := c.nextSub
	c.nextSub++
	c.subs[n] = sub
	if s := c.Config(id); current && s != nil {
		// Queued behind the swaps already posted, ahead of the next:
		// the reader never sees the current snapshot after a newer one.
		c.notes.post(s, []*subscriber{sub})
	}
	c.wg.Add(1)
	c.mu.Unlock()
	c.notes.start()
	go func() {
		defer c.wg.Done()
		select {
		case <-ctx.Done():
		case <-c.ctx.Done():
		}
		sub.stopped.Store(true)
		c.mu.Lock()
		delete(c.subs, n)
		c.mu.Unlock()
		w.close()
	}()
	return w.ch
}
