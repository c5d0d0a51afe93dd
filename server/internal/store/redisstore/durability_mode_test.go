package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestDurabilitySaysWhatRedisPromises reads the persistence settings of
// private redis-servers and checks the promise for each.
func TestDurabilitySaysWhatRedisPromises(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-servers")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--appendonly", "yes", "--appendfsync", "always"}, "survives a crash of the Redis process or host"},
		{[]string{"--appendonly", "yes", "--appendfsync", "everysec"}, "can lose about the last two seconds"},
		{[]string{"--save", "900 1"}, "only RDB snapshots"},
		{nil, "no persistence"},
		{[]string{"--rename-command", "CONFIG", ""}, "refused CONFIG GET"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			s := open(t, newClient(t, srv.Addr), "durability")
			if d := s.Durability(context.Background()); !strings.Contains(d.Promise, tc.want) {
				t.Fatalf("promise %q; want it to say %q", d.Promise, tc.want)
			}
		})
	}
}

// TestWaitAOF: on a Redis without WAITAOF (before 7.2), Open refuses
// WithWaitAOF, naming the version; where Redis has it, every write is
// acknowledged only once Redis fsynced it.
func TestWaitAOF(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "everysec")
	rdb := newClient(t, srv.Addr)
	s, err := Open(context.Background(), rdb, "waitaof", WithWaitAOF(time.Second))
	if err != nil {
		if !strings.Contains(err.Error(), "has no WAITAOF: it needs Redis 7.2 or later") {
			t.Fatalf("Open with WithWaitAOF on a Redis without WAITAOF: %v; want the reason", err)
		}
		t.Skipf("this Redis has no WAITAOF: %v", err)
	}
	defer s.Close()
	for range 20 {
		if _, err := s.Put(context.Background(), store.Put{Key: "/k", Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
}
