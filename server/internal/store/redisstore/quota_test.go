package redisstore

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/storetest"
)

// TestQuota runs the quota's conformance tests. The scripts count what
// they write and admit it in the same step, so the count never passes
// the quota (no slack), even with writers on two handles.
func TestQuota(t *testing.T) {
	var client redis.UniversalClient
	storetest.RunQuota(t, storetest.QuotaSuite{
		Open: func(t *testing.T, q store.Quota) store.Store {
			rdb, prefix := redistest.Shared(t)
			client = rdb
			return open(t, rdb, prefix, WithQuota(q))
		},
		OpenShared: func(t *testing.T, q store.Quota) (store.Store, store.Store) {
			rdb, prefix := redistest.Shared(t)
			other := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
			t.Cleanup(func() { _ = other.Close() })
			return open(t, rdb, prefix, WithQuota(q)), open(t, other, prefix, WithQuota(q))
		},
		Reopen: func(t *testing.T, s store.Store, q store.Quota) store.Store {
			prefix := s.(*Store).prefix
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, client, prefix, WithQuota(q))
		},
	})
}
