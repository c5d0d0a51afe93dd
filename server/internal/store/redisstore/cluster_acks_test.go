package redisstore

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestReplicaAcksOnACluster: a Redis Cluster of three primaries where only
// the primary of the store's slot has a replica. WithReplicaAcks(1) must
// send WAIT to that primary, on the connection that wrote: sent to any
// other node, it finds no replica and every write fails.
func TestReplicaAcksOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t, 3)
	url := "redis+cluster://" + strings.Join(addrs, ",")
	rdb, err := NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	cc := rdb.(*redis.ClusterClient)
	prefix := redistest.Prefix()
	ctx := context.Background()
	primary, err := cc.MasterForKey(ctx, "{"+prefix+"}:rev")
	if err != nil {
		t.Fatal(err)
	}
	id, err := primary.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	replica := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
	add := exec.Command("redis-cli", "--cluster", "add-node", replica.Addr, primary.Options().Addr, "--cluster-slave", "--cluster-master-id", id)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("add the replica: %v\n%s", err, out)
	}
	rc := replica.Client(t)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) { // replication has no event to await
		info, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never linked up: %s", info)
		}
	}
	s := open(t, rdb, prefix, WithReplicaAcks(1, 2*time.Second))
	for i := range 30 {
		if _, err := s.Put(ctx, store.Put{Key: fmt.Sprintf("/k/%d", i), Value: []byte("v")}); err != nil {
			t.Fatalf("write %d with one replica acknowledging: %v", i, err)
		}
	}
}
