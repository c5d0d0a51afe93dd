package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestNoAcknowledgedWriteIsLostWhenRedisIsKilled runs a private
// redis-server with appendonly yes and appendfsync always, kills it with
// SIGKILL while eight writers put and commit transactions, restarts it on
// the same files, and finds every acknowledged write at its revision, the
// log without holes.
func TestNoAcknowledgedWriteIsLostWhenRedisIsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills a redis-server")
	}
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	s := open(t, rdb, "durable")
	type acked struct {
		key, value string
		rev        int64
	}
	var mu sync.Mutex
	var acks []acked
	var unavailable int
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key, value := fmt.Sprintf("/d/%d/%d", w, i), fmt.Sprintf("v%d-%d", w, i)
				var res store.Result
				var err error
				if i%4 == 3 {
					res, err = s.Txn(ctx, store.Txn{Puts: []store.Put{{Key: key, Value: []byte(value)}, {Key: key + "/twin", Value: []byte(value)}}})
				} else {
					res, err = s.Put(ctx, store.Put{Key: key, Value: []byte(value)})
				}
				mu.Lock()
				switch {
				case err == nil && i%4 == 3:
					acks = append(acks, acked{key, value, res.Revision - 1}, acked{key + "/twin", value, res.Revision})
				case err == nil:
					acks = append(acks, acked{key, value, res.Revision})
				case errors.Is(err, store.ErrUnavailable):
					unavailable++
				case ctx.Err() == nil:
					t.Errorf("write %s: %v", key, err)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	// Kill Redis once writes are flowing.
	for {
		mu.Lock()
		n := len(acks)
		mu.Unlock()
		if n >= 500 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.Kill(t)
	for { // until the writers met the dead server
		mu.Lock()
		n := unavailable
		mu.Unlock()
		if n >= 8 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if unavailable == 0 {
		t.Fatal("no write failed: the kill hit nothing")
	}

	srv.Restart(t)
	after := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = after.Close() })
	reopened := open(t, after, "durable")
	bg := context.Background()
	for _, a := range acks {
		kv, _, err := reopened.Get(bg, a.key, 0)
		if err != nil || string(kv.Value) != a.value || kv.ModRevision != a.rev {
			t.Fatalf("acknowledged %s=%s at %d; after the restart: %+v, %v", a.key, a.value, a.rev, kv, err)
		}
	}
	st, err := reopened.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	for from := int64(1); from <= st.Revision; {
		ch, err := reopened.Changes(bg, from, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range ch.Events {
			if ev.Revision() != from {
				t.Fatalf("the log jumps from %d to %d", from-1, ev.Revision())
			}
			from++
		}
	}
	t.Logf("%d acknowledged writes, all found after SIGKILL and restart; %d failed as unavailable; revision %d", len(acks), unavailable, st.Revision)
}

// TestAFailoverLosesNoAcknowledgedWrite: a primary with two replicas
// under a Sentinel; the store waits for one replica on every write
// (WithReplicaAcks). The primary is killed with SIGKILL under write load;
// the Sentinel promotes a replica, the other follows it, the writes go on
// there, and every write acknowledged before or after the failover is on
// the new primary.
func TestAFailoverLosesNoAcknowledgedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two redis-servers and a sentinel, and fails one over")
	}
	primary := redistest.Start(t)
	_, pport, _ := strings.Cut(primary.Addr, ":")
	for range 2 {
		rc := redistest.Start(t, "--replicaof", "127.0.0.1", pport).Client(t)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) { // replication has no event to await
			info, _ := rc.Info(context.Background(), "replication").Result()
			if strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a replica never linked up: %s", info)
			}
		}
	}
	sentinel := redistest.StartSentinel(t, "pawlfail", primary.Addr,
		"sentinel down-after-milliseconds pawlfail 500", "sentinel failover-timeout pawlfail 3000")
	rdb, err := NewClient("redis+sentinel://" + sentinel + "/pawlfail/0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	s := open(t, rdb, "failover", WithReplicaAcks(1, time.Second))

	type acked struct {
		key string
		rev int64
	}
	var mu sync.Mutex
	var acks []acked
	var failed, afterKill int
	killed := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("/f/%d/%d", w, i)
				res, err := s.Put(ctx, store.Put{Key: key, Value: []byte("v")})
				mu.Lock()
				switch {
				case err == nil:
					acks = append(acks, acked{key, res.Revision})
					select {
					case <-killed:
						afterKill++
					default:
					}
				case errors.Is(err, store.ErrUnavailable):
					failed++
				case ctx.Err() == nil:
					t.Errorf("write %s: %v", key, err)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		waitUnder(t, &mu, what, cond, func() string {
			cancel()
			wg.Wait()
			return fmt.Sprintf("(%d acknowledged, %d failed)", len(acks), failed)
		})
	}
	waitFor("200 acknowledged writes", func() bool { return len(acks) >= 200 })
	primary.Kill(t)
	close(killed)
	waitFor("100 writes acknowledged by the new primary", func() bool { return afterKill >= 100 })
	cancel()
	wg.Wait()
	// The fault was real: Sentinel promoted another server. (Whether a
	// write was in flight at the kill is timing: on a loaded machine all
	// four writers may be between writes, and dial the new primary.)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	master, err := sc.GetMasterAddrByName(context.Background(), "pawlfail").Result()
	if err != nil || len(master) != 2 || master[0]+":"+master[1] == primary.Addr {
		t.Fatalf("Sentinel's primary after the kill: %v, %v; want another server than %s", master, err, primary.Addr)
	}
	for _, a := range acks {
		kv, _, err := s.Get(context.Background(), a.key, 0)
		if err != nil || kv.ModRevision != a.rev {
			t.Fatalf("acknowledged %s at revision %d; after the failover: %+v, %v", a.key, a.rev, kv, err)
		}
	}
	t.Logf("%d writes acknowledged (%d after the failover), all on the new primary; %d failed during it", len(acks), afterKill, failed)
}
