package rollout_test

import (
	"context"
	"maps"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/rollout"
)

// TestCountedAcksBeyondTheBound: an instance that counts more reports
// than MaxAcksPerInstance (a new apply sequence each) keeps only the
// bound's worth in the store, the oldest replaced; the views, which follow
// the deletions, judge the rollout as views built afresh from the store do.
func TestCountedAcksBeyondTheBound(t *testing.T) {
	e := newEnv(t)
	rel := e.release(t, 50)
	n := int64(rollout.MaxAcksPerInstance + 4)
	for seq := int64(1); seq <= n; seq++ {
		if a := e.ack(t, rel, "i0", "boot-1", seq, rollout.Discovered); !a.Counted {
			t.Fatalf("DISCOVERED at apply sequence %d: %+v", seq, a)
		}
	}
	acks, err := e.rollouts.Acks(context.Background(), "routing", rel.Generation)
	if err != nil {
		t.Fatal(err)
	}
	if len(acks) != rollout.MaxAcksPerInstance || acks[0].ApplySequence != n-int64(rollout.MaxAcksPerInstance)+1 {
		t.Fatalf("after %d counted ACKs the store holds %d, the oldest at apply sequence %d; want the newest %d", n, len(acks), acks[0].ApplySequence, rollout.MaxAcksPerInstance)
	}
	fresh := run(t, rollout.New(e.store, e.releases, e.registry, rollout.WithClock(e.clock.Now)))
	st, err := fresh.Status(context.Background(), "routing", rel.Generation)
	if err != nil {
		t.Fatal(err)
	}
	live := e.status(t, rel.Generation)
	if !maps.Equal(live.Stages[0].States, st.Stages[0].States) || live.Stages[0].Evaluation.Healthy != st.Stages[0].Evaluation.Healthy {
		t.Errorf("the live views say %v, views read afresh from the store %v", live.Stages[0].States, st.Stages[0].States)
	}
	// The next report is judged against what is kept.
	if a := e.ack(t, rel, "i0", "boot-1", n, rollout.Discovered); a.Counted {
		t.Errorf("the same report again counted: %+v", a)
	}
}
