package boltstore

import (
	"testing"

	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/storetest"
)

// TestQuota runs the quota's conformance tests. bbolt's size grows by
// pages, and splits of its tree's nodes, beyond what store.PutCost counts:
// the slack is a few pages per group the writer admits at once.
func TestQuota(t *testing.T) {
	storetest.RunQuota(t, storetest.QuotaSuite{
		Open: func(t *testing.T, q store.Quota) store.Store {
			return open(t, t.TempDir(), WithQuota(q))
		},
		Slack: 16 << 10,
		Reopen: func(t *testing.T, s store.Store, q store.Quota) store.Store {
			dir := s.(*Store).dir
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, dir, WithQuota(q))
		},
	})
}
