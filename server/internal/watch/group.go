package watch

import (
	"context"
	"sync"
)

// Group is a set of watchers that share one wake-up, so that one
// goroutine (a session's writer) serves them all: no goroutine and no
// notify channel per watcher.
//
// A watcher of a group that the hub wakes (a progress tick, a stale
// notice, a progress request) puts itself once on the group's ready list
// and makes a pending wake-up on the group's one notify channel, without
// blocking. Publish instead marks, once per group, the prefixes the batch
// concerns (its cost on the commit path is per group, not per watcher);
// Ready expands them into the group's watchers of those prefixes. The
// group's owner waits on Notify, takes the ready watchers with Ready, and
// drains each with Watcher.Poll. Publish marks all that one batch
// concerns of a group before it makes the wake-up, so that the owner
// finds all of them ready together and can send what one change did to
// several watches in one message.
//
// The owner is one goroutine at a time (a session's writers take turns):
// Ready, Watch (of the group), Poll and Close of the group's watchers are
// called from it; the hub marks watchers ready concurrently. When the hub
// closes, it wakes every group that has a watcher.
type Group struct {
	hub    *Hub
	notify chan struct{} // buffered(1): a pending wake-up
	wake   func()        // when set (NewGroupFunc), called instead of a send on notify

	mu       sync.Mutex
	ready    []*Watcher                       // the watchers marked ready, each once (Watcher.inReady)
	prefixes map[string]struct{}              // the prefixes marked ready: all the group's watchers of them are
	byPrefix map[string]map[*Watcher]struct{} // the group's open watchers, by prefix
}

// marks is what the hub marks ready in a group at one wake-up: watchers,
// and prefixes whose every watcher of the group is ready.
type marks struct {
	watchers []*Watcher
	prefixes []string
}

// NewGroup returns an empty group of the hub's watchers. A group holds
// no goroutine and needs no Close; its watchers are closed one by one.
func (h *Hub) NewGroup() *Group {
	return &Group{
		hub:      h,
		notify:   make(chan struct{}, 1),
		prefixes: make(map[string]struct{}),
		byPrefix: make(map[string]map[*Watcher]struct{}),
	}
}

// NewGroupFunc returns an empty group, as NewGroup does, whose wake-up
// is a call of wake rather than a value on Notify: its owner needs no
// goroutine waiting for it. wake is called after watchers or prefixes
// were marked ready, by the hub (on the commit path, under its watcher
// lock) or by the group's own Watch; it must not block, and it must not
// call the group or the hub.
func (h *Hub) NewGroupFunc(wake func()) *Group {
	g := h.NewGroup()
	g.wake = wake
	return g
}

// Watch registers a watcher of the group, as Hub.Watch does: for keys
// under prefix, from revision start (inclusive; 0 means after the newest
// revision). The watcher is drained with Poll (Next would never wake);
// it is ready at once, so that a watcher whose start is in the past is
// polled without waiting for a change. The caller must Close it.
func (g *Group) Watch(ctx context.Context, prefix string, start int64) (*Watcher, error) {
	w, err := g.hub.watch(ctx, prefix, start, g)
	if err != nil {
		return nil, err
	}
	g.mark(marks{watchers: []*Watcher{w}})
	return w, nil
}

// Notify is the group's wake-up: it has a value pending after any of its
// watchers was marked ready since the last receive. A group made by
// NewGroupFunc wakes by its function instead, and Notify never has a
// value.
func (g *Group) Notify() <-chan struct{} { return g.notify }

// Done is closed when the hub closes: the polls of the group's watchers
// then fail with ErrClosed, and no wake-up comes any more.
func (g *Group) Done() <-chan struct{} { return g.hub.ctx.Done() }

// Ready takes the watchers marked ready since the last call, each once:
// those marked one by one in the order they were marked, then those of
// the prefixes marked, leaving out the closed ones. A watcher woken again
// after Ready took it is marked again.
func (g *Group) Ready() []*Watcher {
	g.mu.Lock()
	ready := g.ready
	g.ready = nil
	for p := range g.prefixes {
		for w := range g.byPrefix[p] {
			if !w.inReady {
				w.inReady = true
				ready = append(ready, w)
			}
		}
	}
	clear(g.prefixes)
	for _, w := range ready {
		w.inReady = false
	}
	g.mu.Unlock()
	out := ready[:0]
	for _, w := range ready {
		if !w.closed {
			out = append(out, w)
		}
	}
	return out
}

// mark puts the watchers of m not already there on the ready list and
// the prefixes of m in the ready prefixes, then makes a wake-up pending.
// It never blocks on the owner.
func (g *Group) mark(m marks) {
	g.mu.Lock()
	for _, w := range m.watchers {
		if !w.inReady {
			w.inReady = true
			g.ready = append(g.ready, w)
		}
	}
	for _, p := range m.prefixes {
		g.prefixes[p] = struct{}{}
	}
	g.mu.Unlock()
	if g.wake != nil {
		g.wake()
		return
	}
	select {
	case g.notify <- struct{}{}:
	default:
	}
}
