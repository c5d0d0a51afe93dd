package boltstore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestChangeCheckFindsWhatTestingEachConditionFinds: past linearConds
// conditions, the lookup by prefix names the condition that testing the
// key against each condition in order names (the first it breaks, as
// Store.Txn promises); nested prefixes ("i1" of "i10"), the empty prefix
// and one prefix under several revisions are among the conditions.
func TestChangeCheckFindsWhatTestingEachConditionFinds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteByte("ab/"[rng.IntN(3)])
		}
		return b.String()
	}
	for round := range 2000 {
		conds := make([]store.Unchanged, linearConds+1+rng.IntN(40))
		for i := range conds {
			conds[i] = store.Unchanged{Prefix: word(), Since: int64(rng.IntN(10))}
		}
		c := newChangeCheck(conds)
		for range 50 {
			key, rev := word()+word(), int64(rng.IntN(12))
			got := c.broken(rev, key)
			var want *store.ChangedError
			for _, u := range conds {
				if rev > u.Since && strings.HasPrefix(key, u.Prefix) {
					want = &store.ChangedError{Prefix: u.Prefix, Since: u.Since}
					break
				}
			}
			switch {
			case (got == nil) != (want == nil):
				t.Fatalf("round %d: %q at %d against %+v: got %+v, want %+v", round, key, rev, conds, got, want)
			case got != nil && (got.Prefix != want.Prefix || got.Since != want.Since || got.Key != key || got.Revision != rev):
				t.Fatalf("round %d: %q at %d against %+v: named %+v, want the first it breaks, %+v", round, key, rev, conds, got, want)
			}
		}
		if c.byPrefix == nil {
			t.Fatalf("%d conditions were tested one by one", len(conds))
		}
	}
}

// BenchmarkChangeCheck is a batch of 200 ACKs' conditions (two per
// instance, five per release) checked against 2,000 changes of other
// instances.
func BenchmarkChangeCheck(b *testing.B) {
	var conds []store.Unchanged
	for _, p := range []string{"/_pawl/configs/routing/active", "/_pawl/configs/routing/head", "/_pawl/configs/routing/stops/7",
		"/_pawl/configs/routing/progress/7", "/_pawl/configs/routing/retired/7/"} {
		conds = append(conds, store.Unchanged{Prefix: p, Since: 100})
	}
	for i := range 200 {
		conds = append(conds, store.Unchanged{Prefix: fmt.Sprintf("/_pawl/instances/i%d", i), Since: 100},
			store.Unchanged{Prefix: fmt.Sprintf("/_pawl/acks/routing/7/i%d/", i), Since: 100})
	}
	keys := make([]string, 2000)
	for i := range keys {
		keys[i] = fmt.Sprintf("/_pawl/acks/routing/7/j%d/1796422629332083513", i)
	}
	for _, mode := range []string{"lookup", "each"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				c := newChangeCheck(conds)
				for _, k := range keys {
					if mode == "each" {
						if eachBroken(conds, 101, k) {
							b.Fatal("broken")
						}
						continue
					}
					if c.broken(101, k) != nil {
						b.Fatal("broken")
					}
				}
			}
		})
	}
}

// eachBroken tests key against each condition, as changeCheck does for a
// few (and as it did for any number).
func eachBroken(conds []store.Unchanged, rev int64, key string) bool {
	for _, u := range conds {
		if rev > u.Since && strings.HasPrefix(key, u.Prefix) {
			return true
		}
	}
	return false
}
