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
