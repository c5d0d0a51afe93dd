package api

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/server/internal/rollout"
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

// TestADeltaCarriesOnlyTheConfigsThatChanged: a stream holding configs
// a to d, given b unchanged, d at a new generation, e new and a with no
// assignment left (c not computed), sends d and e and removes a; then it
// holds b, c, d and e, and the same computation again sends nothing.
func TestADeltaCarriesOnlyTheConfigsThatChanged(t *testing.T) {
	at := func(config string, gen int64) []rollout.Assignment {
		return []rollout.Assignment{{ConfigID: config, Generation: gen}}
	}
	var sent []*pawlv1.WatchAssignmentsResponse
	s := &assignmentStream{deltas: true, send: func(m *pawlv1.WatchAssignmentsResponse) error {
		sent = append(sent, m)
		return nil
	}}
	if err := s.sendFull(map[string][]rollout.Assignment{"a": at("a", 1), "b": at("b", 1), "c": at("c", 1), "d": at("d", 1)}, 1); err != nil {
		t.Fatal(err)
	}
	computed := map[string][]rollout.Assignment{"a": nil, "b": at("b", 1), "d": at("d", 2), "e": at("e", 1)}
	for range 2 {
		if err := s.sendChanges(context.Background(), computed, 2); err != nil {
			t.Fatal(err)
		}
	}
	if len(sent) != 2 {
		t.Fatalf("%d messages, want the full set and one delta", len(sent))
	}
	var got []string
	for _, a := range sent[1].GetAssignments() {
		got = append(got, fmt.Sprintf("%s@%d", a.GetConfigId(), a.GetGeneration()))
	}
	if fmt.Sprint(got) != "[d@2 e@1]" || fmt.Sprint(sent[1].GetRemovedConfigIds()) != "[a]" {
		t.Fatalf("delta %v, removed %v; want [d@2 e@1], removed [a]", got, sent[1].GetRemovedConfigIds())
	}
	want := map[string]uint64{"b": assignmentsKey(at("b", 1)), "c": assignmentsKey(at("c", 1)), "d": assignmentsKey(at("d", 2)), "e": assignmentsKey(at("e", 1))}
	if held := entriesOf(s.held); !maps.Equal(held, want) {
		t.Fatalf("held %v, want %v", held, want)
	}
}
