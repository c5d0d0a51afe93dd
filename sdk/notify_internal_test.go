package sdk

import "testing"

// TestAWatchChannelIsLatestWins: a reader that takes nothing while three
// snapshots are offered then reads the newest, and only it.
func TestAWatchChannelIsLatestWins(t *testing.T) {
	w := &watchChan{ch: make(chan *Snapshot, 1)}
	for gen := int64(1); gen <= 3; gen++ {
		w.offer(&Snapshot{Config: "routing", Generation: gen})
	}
	if s := <-w.ch; s.Generation != 3 {
		t.Fatalf("read %s, want routing@3", s)
	}
	w.close()
	w.close()
	w.offer(&Snapshot{Generation: 4}) // after close: dropped, no panic
	if s, ok := <-w.ch; ok {
		t.Fatalf("read %s after close", s)
	}
}
