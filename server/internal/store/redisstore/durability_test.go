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

// TestAFailoverLosesNoAcknowledgedWrite: a primary with one replica
// under a Sentinel; the store waits for the replica on every write
// (WithReplicaAcks(1): every replica Sentinel could promote). The primary
// is killed with SIGKILL under write load; the Sentinel promotes the
// replica, a new server becomes its replica, the writes go on there, and every write
// acknowledged before or after the failover is on the new primary.
//
// The kill may also take a write the primary ran but had not replicated:
// not acknowledged, yet its revision may have been handed out (read by
// the store's feed). Then the new primary holds fewer revisions than the
// store handed out, and the store refuses writes (ErrRolledBack) rather
// than give a revision out twice. That is not a lost acknowledged write:
// the test checks that the head the store found holds every acknowledged
// revision, accepts the rollback as an operator would, and goes on.
func TestAFailoverLosesNoAcknowledgedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three redis-servers and a sentinel, and fails one over")
	}
	primary := redistest.Start(t)
	_, pport, _ := strings.Cut(primary.Addr, ":")
	rc := redistest.Start(t, "--replicaof", "127.0.0.1", pport).Client(t)
	waitLinked(t, rc)
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
	var rolledBack *store.RolledBackError
	cur := s // the store the writers write through, under mu
	killed := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("/f/%d/%d", w, i)
				mu.Lock()
				through := cur
				mu.Unlock()
				res, err := through.Put(ctx, store.Put{Key: key, Value: []byte("v")})
				mu.Lock()
				var rb *store.RolledBackError
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
				case errors.As(err, &rb) && chanClosed(killed):
					if rolledBack == nil {
						rolledBack = rb
					}
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
			return fmt.Sprintf("(%d acknowledged, %d failed, rolled back: %v)", len(acks), failed, rolledBack)
		})
	}
	waitFor("200 acknowledged writes", func() bool { return len(acks) >= 200 })
	primary.Kill(t)
	close(killed)
	// The fault is real: Sentinel promotes another server.
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	waitFor("Sentinel's promotion of the replica", func() bool {
		master, err := sc.GetMasterAddrByName(context.Background(), "pawlfail").Result()
		return err == nil && len(master) == 2 && master[0]+":"+master[1] != primary.Addr
	})
	// A new, empty server replaces the killed one as the new primary's
	// replica (as an operator would), and WAIT can be answered again.
	master, err := sc.GetMasterAddrByName(context.Background(), "pawlfail").Result()
	if err != nil {
		t.Fatal(err)
	}
	spare := redistest.Start(t).Client(t)
	if err := spare.ReplicaOf(context.Background(), master[0], master[1]).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor("the new replica to follow the new primary", func() bool { return linked(spare) })
	waitFor("100 writes acknowledged by the new primary, or a rollback found",
		func() bool { return afterKill >= 100 || rolledBack != nil })
	mu.Lock()
	rb := rolledBack
	mu.Unlock()
	if rb != nil {
		// Every acknowledged write is at or below the head the new
		// primary holds: what it lacks was never acknowledged.
		mu.Lock()
		for _, a := range acks {
			if a.rev > rb.Head {
				mu.Unlock()
				t.Fatalf("%s was acknowledged at revision %d; the new primary holds revisions up to %d: %v", a.key, a.rev, rb.Head, rb)
			}
		}
		mu.Unlock()
		t.Logf("the failover lost revisions the primary had not replicated (none acknowledged): %v", rb)
		accepting := open(t, rdb, "failover", WithReplicaAcks(1, time.Second), WithAcceptRollback())
		if accepting.Accepted() == nil {
			t.Fatal("the rollback found was not there to accept")
		}
		mu.Lock()
		cur, afterKill = accepting, 0
		mu.Unlock()
		waitFor("100 writes acknowledged after the rollback was accepted", func() bool { return afterKill >= 100 })
		s = accepting
	}
	cancel()
	wg.Wait()
	for _, a := range acks {
		kv, _, err := s.Get(context.Background(), a.key, 0)
		if err != nil || kv.ModRevision != a.rev {
			t.Fatalf("acknowledged %s at revision %d; after the failover: %+v, %v", a.key, a.rev, kv, err)
		}
	}
	t.Logf("%d writes acknowledged (%d after the failover), all on the new primary; %d failed during it", len(acks), afterKill, failed)
}

// waitLinked waits until the replica rc is linked to its primary.
func waitLinked(t *testing.T, rc *redis.Client) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !linked(rc); time.Sleep(20 * time.Millisecond) { // replication has no event to await
		if time.Now().After(deadline) {
			info, _ := rc.Info(context.Background(), "replication").Result()
			t.Fatalf("a replica never linked up: %s", info)
		}
	}
}

// linked reports whether the replica rc is linked to its primary.
func linked(rc *redis.Client) bool {
	info, _ := rc.Info(context.Background(), "replication").Result()
	return strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
}

// chanClosed reports whether ch is closed.
func chanClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
