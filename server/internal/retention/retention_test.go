package retention_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/retention"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
)

func TestApplyKeepsWhatThePolicySays(t *testing.T) {
	ctx := context.Background()
	st, err := boltstore.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 30 {
		if _, err := st.Put(ctx, store.Put{Key: fmt.Sprintf("/r/%d", i%5), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	for _, c := range []struct {
		name string
		p    retention.Policy
		now  time.Time
		want int64
	}{
		{"no limits", retention.Policy{}, now, 0},
		{"ten revisions", retention.Policy{Revisions: 10}, now, 20},
		{"an hour, all recent", retention.Policy{Revisions: 10, Age: time.Hour}, now, 20},
		{"an hour, two hours later", retention.Policy{Revisions: 10, Age: time.Hour}, now.Add(2 * time.Hour), 30},
		{"more revisions than exist", retention.Policy{Revisions: 100}, now, 30}, // already compacted to 30
	} {
		got, err := retention.Apply(ctx, st, c.p, c.now)
		if err != nil || got != c.want {
			t.Errorf("%s: Apply = %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

// reportsPolicy keeps eight counted revisions; what falls under /_r/ does
// not count.
var reportsPolicy = retention.Policy{Revisions: 8, Uncounted: []string{"/_r/"}}

// writeMixed writes counted revisions (a put under /k/, or a transaction
// that touches /k/ and /_r/ together) and uncounted ones (puts under /_r/
// only), reports per counted one, and returns the counted revisions.
func writeMixed(t *testing.T, st store.Store, counted, reportsPer int) []int64 {
	t.Helper()
	ctx := context.Background()
	var revs []int64
	for i := range counted {
		for j := range reportsPer {
			if _, err := st.Put(ctx, store.Put{Key: fmt.Sprintf("/_r/%d", j), Value: []byte("ack")}); err != nil {
				t.Fatal(err)
			}
		}
		var res store.Result
		var err error
		if i%2 == 0 {
			res, err = st.Put(ctx, store.Put{Key: "/k/a", Value: []byte("v")})
		} else { // a revision with a report and a counted change counts
			res, err = st.Txn(ctx, store.Txn{Puts: []store.Put{{Key: "/_r/x", Value: []byte("ack")}, {Key: "/k/b", Value: []byte("v")}}})
		}
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, res.Revision)
	}
	return revs
}

func openBolt(t *testing.T) store.Store {
	t.Helper()
	st, err := boltstore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func TestUncountedRevisionsDoNotUseUpTheRetention(t *testing.T) {
	ctx := context.Background()
	st := openBolt(t)
	revs := writeMixed(t, st, 12, 5) // 12 counted revisions, 5 reports before each
	got, err := retention.Apply(ctx, st, reportsPolicy, time.Now())
	if want := revs[len(revs)-8] - 1; err != nil || got != want {
		t.Fatalf("Apply = %d, %v; want %d, below the eighth newest counted revision", got, err, want)
	}
	// The log's own bound compacts reports too.
	p := reportsPolicy
	p.LogRevisions = 10
	status, _ := st.Status(ctx)
	got, err = retention.Apply(ctx, st, p, time.Now())
	if want := status.Revision - 10; err != nil || got != want {
		t.Fatalf("Apply with LogRevisions 10 = %d, %v; want %d", got, err, want)
	}
}

// TestTheCompactorCountsTheLogItFindsAndFollowsTheFeed: a compactor that
// starts over a log of counted and uncounted revisions counts what the log
// holds, then follows the feed, and compacts to just below the eighth
// newest counted revision as soon as enough new ones came (or the ninth:
// it may lag by the tenth of the policy it lets accumulate, here one).
func TestTheCompactorCountsTheLogItFindsAndFollowsTheFeed(t *testing.T) {
	st := openBolt(t)
	before := writeMixed(t, st, 5, 7)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// An interval of an hour: only the feed makes compaction due.
		retention.NewCompactor(st, reportsPolicy, retention.WithInterval(time.Hour)).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	after := writeMixed(t, st, 6, 7)
	revs := append(before, after...)
	want, lagging := revs[len(revs)-8]-1, revs[len(revs)-9]-1
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, err := st.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if status.CompactRevision == want || status.CompactRevision == lagging {
			return
		}
		if status.CompactRevision > want || time.Now().After(deadline) {
			t.Fatalf("compact revision %d; want %d or %d, below the eighth or ninth newest counted revision of %v", status.CompactRevision, want, lagging, revs)
		}
		time.Sleep(5 * time.Millisecond) // awaiting the compactor, which says nothing when it is done
	}
}
