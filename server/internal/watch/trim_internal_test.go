package watch

import "testing"

// TestAQuietPrefixGivesBackItsIndex: a prefix whose 10,000 events left
// the ring but ten keeps those ten in an array of their own, not in the
// 10,000-revision array it had, which no later append would reallocate.
func TestAQuietPrefixGivesBackItsIndex(t *testing.T) {
	tr := &prefixTrack{revs: make([]int64, 0, 10_000)}
	for rev := int64(1); rev <= 10_000; rev++ {
		tr.revs = append(tr.revs, rev)
	}
	array := tr.revs
	tr.trim(100) // a little: the array stays
	if len(tr.revs) != 9_901 || &tr.revs[0] != &array[99] {
		t.Fatalf("after trim(100): %d revisions from %d, in another array", len(tr.revs), tr.revs[0])
	}
	tr.trim(9_991)
	if len(tr.revs) != 10 || tr.revs[0] != 9_991 || tr.revs[9] != 10_000 {
		t.Fatalf("after trim(9991): %v", tr.revs)
	}
	if &tr.revs[0] == &array[9_990] {
		t.Fatal("ten revisions kept in the array of 10,000")
	}
}
