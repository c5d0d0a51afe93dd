package rollout

import "testing"

// TestAKeptLateReleaseGoesWhenItsConfigChangesOrTheViewsStartOver: a
// release the batches keep is dropped when it was read before the views'
// snapshot (which knows of no change: changed 0), kept when read at it
// with nothing changed since, and dropped once its config changed.
func TestAKeptLateReleaseGoesWhenItsConfigChangesOrTheViewsStartOver(t *testing.T) {
	v := &views{configs: map[string]*configView{"c": {}}, since: 10, rev: 12}
	var l lateReleases
	l.put("c", 1, releaseView{}, 5) // read before the views followed from 10
	l.dropChangedLocked(v, "c", 1)
	if _, ok := l.kept[lateKey{"c", 1}]; ok {
		t.Fatal("kept across a new snapshot of the views")
	}
	l.put("c", 1, releaseView{}, 10)
	l.dropChangedLocked(v, "c", 1)
	if _, ok := l.kept[lateKey{"c", 1}]; !ok {
		t.Fatal("dropped though read at the snapshot and nothing changed since")
	}
	v.configs["c"].changed = 11
	l.dropChangedLocked(v, "c", 1)
	if _, ok := l.kept[lateKey{"c", 1}]; ok {
		t.Fatal("kept after its config changed")
	}
	for gen := range int64(maxLateReleases + 10) { // bounded: one goes for each new one
		l.put("c", gen, releaseView{}, 12)
	}
	if len(l.kept) != maxLateReleases {
		t.Fatalf("%d releases kept, want at most %d", len(l.kept), maxLateReleases)
	}
}
