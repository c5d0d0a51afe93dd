package watch

// MarkedOneByOne is the number of watchers on g's ready list, marked one
// by one (not through a prefix) since its owner last called Ready.
func MarkedOneByOne(g *Group) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.ready)
}

// LockHub takes h's lock, as Publish does, until unlock is called.
func LockHub(h *Hub) (unlock func()) {
	h.mu.Lock()
	return h.mu.Unlock
}
