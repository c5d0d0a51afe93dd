package release

import (
	"container/list"
	"sync"
)

// DefaultCacheSize is how many decoded releases a Releases keeps: the
// active and newest release of a few hundred configs, each decoded once
// however many ACKs, assignments and status reads ask for it. A release of
// 10,000 members is about a megabyte of JSON and takes milliseconds to
// decode.
const DefaultCacheSize = 512

// cache keeps decoded releases, least recently used first out. Releases
// are immutable, so an entry is never stale; callers share the cached
// value and must not modify it (its slices and maps included).
type cache struct {
	mu      sync.Mutex
	size    int
	order   *list.List // of cacheKey, most recent at the front
	entries map[cacheKey]cacheEntry
}

type cacheKey struct {
	config string
	gen    int64
}

type cacheEntry struct {
	rel  Release
	elem *list.Element
}

func newCache(size int) *cache {
	return &cache{size: size, order: list.New(), entries: map[cacheKey]cacheEntry{}}
}

func (c *cache) get(config string, gen int64) (Release, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[cacheKey{config, gen}]
	if !ok {
		return Release{}, false
	}
	c.order.MoveToFront(e.elem)
	return e.rel, true
}

func (c *cache) put(rel Release) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{rel.ConfigID, rel.Generation}
	if e, ok := c.entries[k]; ok {
		c.order.MoveToFront(e.elem)
		return
	}
	c.entries[k] = cacheEntry{rel: rel, elem: c.order.PushFront(k)}
	for c.order.Len() > c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(cacheKey))
	}
}
