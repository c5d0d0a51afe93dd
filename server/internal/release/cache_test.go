package release

import "testing"

func TestCacheKeepsTheMostRecentlyUsed(t *testing.T) {
	c := newCache(2)
	c.put(Release{Spec: Spec{ConfigID: "a"}, Generation: 1})
	c.put(Release{Spec: Spec{ConfigID: "a"}, Generation: 2})
	if _, ok := c.get("a", 1); !ok { // 1 is now the most recent
		t.Fatal("a@1 not cached")
	}
	c.put(Release{Spec: Spec{ConfigID: "b"}, Generation: 1}) // evicts a@2
	if _, ok := c.get("a", 2); ok {
		t.Fatal("a@2, the least recently used, was kept")
	}
	for _, k := range []cacheKey{{"a", 1}, {"b", 1}} {
		if rel, ok := c.get(k.config, k.gen); !ok || rel.ConfigID != k.config || rel.Generation != k.gen {
			t.Fatalf("%v = %+v, %v", k, rel, ok)
		}
	}
	c.put(Release{Spec: Spec{ConfigID: "b"}, Generation: 1}) // again: no duplicate entry
	if c.order.Len() != 2 || len(c.entries) != 2 {
		t.Fatalf("%d in order, %d entries", c.order.Len(), len(c.entries))
	}
}
