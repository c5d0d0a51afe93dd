package api

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// entriesOf reads h back as a map.
func entriesOf(h heldKeys) map[string]uint64 {
	out := map[string]uint64{}
	c := h.cursor()
	last := ""
	for e, ok := c.next(); ok; e, ok = c.next() {
		if len(out) > 0 && e.config <= last {
			panic("entries out of config order: " + last + " then " + e.config)
		}
		last = e.config
		out[e.config] = e.key
	}
	return out
}

// TestHeldKeysMergeChangesAsAMapWould: random changes (sets, replacements,
// drops with key 0) on random held sets, with config names of any bytes
// and of any length (a length over 127 takes two bytes), leave exactly
// what a map given the same changes holds, in config order.
func TestHeldKeysMergeChangesAsAMapWould(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"", "a", "a\x00", "b", "ab", "é", strings.Repeat("x", 200), strings.Repeat("x", 201), "\xff"}
	for i := range 40 {
		names = append(names, strings.Repeat("c", i%7)+string(rune('a'+i%26)))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for round := range 500 {
		var held heldKeys
		want := map[string]uint64{}
		for range 4 {
			var changes []heldEntry
			for _, n := range names {
				if rng.IntN(3) != 0 {
					continue
				}
				key := rng.Uint64() | 1
				if rng.IntN(4) == 0 {
					key = 0
				}
				changes = append(changes, heldEntry{config: n, key: key})
				if key == 0 {
					delete(want, n)
				} else {
					want[n] = key
				}
			}
			held = held.withChanges(changes)
			if got := entriesOf(held); !maps.Equal(got, want) {
				t.Fatalf("round %d: held %v, want %v", round, got, want)
			}
		}
	}
}

// TestStreamsHoldingTheSameKeysShareThem: two streams given the same keys
// (in changes of different shapes) hold one copy; a stream that holds
// nothing is the zero value.
func TestStreamsHoldingTheSameKeysShareThem(t *testing.T) {
	one := heldKeys{}.withChanges([]heldEntry{{"a", 1}, {"b", 2}, {"c", 3}})
	other := heldKeys{}.withChanges([]heldEntry{{"a", 1}, {"c", 9}}).withChanges([]heldEntry{{"b", 2}, {"c", 3}})
	if one != other {
		t.Fatalf("the same keys are held twice: %v and %v", entriesOf(one), entriesOf(other))
	}
	if none := one.withChanges([]heldEntry{{"a", 0}, {"b", 0}, {"c", 0}}); none != (heldKeys{}) {
		t.Fatalf("dropping every config leaves %v", entriesOf(none))
	}
}
