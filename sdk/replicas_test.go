package sdk_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/pawldtest"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/server"
)

// startReplicas starts n pawld processes on the shared Redis under a new
// prefix, with a one-second work lease.
func startReplicas(t *testing.T, n int) ([]*pawldtest.Process, func() int) {
	t.Helper()
	rdb, prefix := redistest.Shared(t)
	procs := pawldtest.Replicas(t, n, prefix, "--validator-cache", wasmbuild.CacheDir(t))
	// supervisor is the index of the replica holding the supervisor's
	// lease, from the holder Redis records (host/pid/random).
	supervisor := func() int {
		deadline := time.Now().Add(time.Minute) // a bound, not a wait: generous for a loaded machine
		for {
			holder, _ := rdb.HGet(context.Background(), "{"+prefix+"}:lease:rollout-supervisor", "holder").Result()
			if parts := strings.Split(holder, "/"); len(parts) == 3 {
				pid, _ := strconv.Atoi(parts[1])
				for i, p := range procs {
					if p.Pid == pid {
						return i
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no replica holds the supervisor's lease (holder %q)", holder)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return procs, supervisor
}

// urlsFrom lists the replicas' URLs starting at the i-th.
func urlsFrom(procs []*pawldtest.Process, i int) string {
	var urls []string
	for k := range procs {
		urls = append(urls, procs[(i+k)%len(procs)].URL)
	}
	return strings.Join(urls, ",")
}

// TestSpacesResumeOnAnotherReplica: clients given three replicas follow a
// key space on the first; it is killed (SIGKILL) in the middle of a
// stream of writes sent to another, and each client resumes on the next
// replica from its last revision: every change once, in order.
func TestSpacesResumeOnAnotherReplica(t *testing.T) {
	procs, _ := startReplicas(t, 3)
	h := &harness{t: t, ctx: context.Background()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h.ctx = ctx
	h.connectTo(procs[2].URL)
	const clients, writes = 20, 200
	type seen struct {
		mu   sync.Mutex
		keys []string
	}
	spaces := make([]*sdk.Space, clients)
	seens := make([]*seen, clients)
	cs := make([]*sdk.Client, clients)
	for i := range spaces {
		cs[i] = h.clientAt(urlsFrom(procs, 0), fmt.Sprintf("reader-%d", i), sdk.WithoutAssignments())
		sp, err := cs[i].Space(ctx, "/s/")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sp.Close)
		spaces[i], seens[i] = sp, &seen{}
		sn := seens[i]
		sp.OnChange(func(c sdk.Change) {
			sn.mu.Lock()
			sn.keys = append(sn.keys, c.Key)
			sn.mu.Unlock()
		})
	}
	var want []string
	var last int64
	for i := 1; i <= writes; i++ {
		if i == writes/2 {
			procs[0].Kill()
		}
		key := fmt.Sprintf("/s/%04d", i)
		resp, err := h.kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte("v")}))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, key)
		last = resp.Msg.GetRevision()
	}
	for i, sp := range spaces {
		if err := sp.WaitRevision(ctx, last); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		seens[i].mu.Lock()
		got := slices.Clone(seens[i].keys)
		seens[i].mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("client %d saw %d changes, want the %d writes once each in order; first ones %v", i, len(got), len(want), got[:min(5, len(got))])
		}
		if cs[i].Server() == procs[0].URL {
			t.Fatalf("client %d still uses the killed replica", i)
		}
	}
}

// TestRolloutAcrossReplicasWhileTheSupervisorDies: six SDK clients spread
// over three replicas take a release to HEALTHY_ACKED (their ACKs sent to
// whichever replica each uses) and it is promoted on another. Then the
// replica that supervises rollouts is killed with SIGKILL: another takes
// the supervisor's lease over and stops a release at its deadline, the
// clients of the dead replica move on, and a third release goes through
// and is promoted.
func TestRolloutAcrossReplicasWhileTheSupervisorDies(t *testing.T) {
	procs, supervisor := startReplicas(t, 3)
	sup := supervisor()
	op := (sup + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := &harness{t: t, ctx: ctx}
	h.connectTo(procs[op].URL)
	h.upload()
	var ids []string
	clients := map[string]*sdk.Client{}
	for i := range 6 {
		id := fmt.Sprintf("i%d", i)
		clients[id] = h.clientAt(urlsFrom(procs, i%3), id, sdk.WithZone(fmt.Sprintf("zone-%c", 'a'+i%3)))
		ids = append(ids, id)
	}
	h.waitRegistered(ids...)
	allHealthy := func(gen int64) {
		t.Helper()
		h.awaitAcks(gen, func(states map[string][]string) bool {
			for _, id := range ids {
				if !reported(states, id, "HEALTHY_ACKED") {
					return false
				}
			}
			return true
		})
	}

	rel1 := h.release(30, nil)
	allHealthy(rel1.GetGeneration())
	h.promote(rel1.GetGeneration())
	for _, id := range ids {
		has(t, clients[id], rel1.GetGeneration())
	}

	procs[sup].Kill()
	dead := procs[sup].URL
	rel2 := h.release(40, func(spec *pawlv1.ReleaseSpec) {
		spec.HealthWindow = durationpb.New(time.Minute) // nobody is healthy in time
		spec.Deadline = durationpb.New(3 * time.Second)
	})
	h.awaitKV("/_pawl/", func() bool {
		return h.status(rel2.GetGeneration()).GetState() == pawlv1.ReleaseState_RELEASE_STATE_STOPPED
	})
	if stop := h.status(rel2.GetGeneration()).GetStop(); !strings.Contains(stop.GetReason(), "the deadline passed") {
		t.Fatalf("generation %d stopped by %+v", rel2.GetGeneration(), stop)
	}
	if now := supervisor(); now == sup {
		t.Fatal("the supervisor's lease is still the dead replica's")
	}

	rel3 := h.release(50, nil)
	allHealthy(rel3.GetGeneration())
	h.promote(rel3.GetGeneration())
	for _, id := range ids {
		has(t, clients[id], rel3.GetGeneration())
		if clients[id].Server() == dead {
			t.Errorf("%s still uses the dead replica", id)
		}
	}
}

// replicasBehindAProxy starts two replicas on one store in the shared
// Redis: cutOff reaches Redis through proxy (which a test partitions),
// other directly. The harness's operator clients use other, with the
// two minutes' deadline newHarness gives: it bounds the whole test, whose
// upload and first download of the 3.3 MB validator have taken 20 s of a
// single minute under -race on a loaded machine before the cut.
func replicasBehindAProxy(t *testing.T) (h *harness, proxy *faultproxy.Holder, cutOff, other *testserver.Server) {
	t.Helper()
	_, prefix := redistest.Shared(t)
	proxy = faultproxy.NewHolder(t, redistest.Addr())
	cutOff = testserver.Start(t, server.WithStore("redis://"+proxy.Addr+"/0"), server.WithRedisPrefix(prefix))
	other = testserver.Start(t, server.WithStore("redis://"+redistest.Addr()+"/0"), server.WithRedisPrefix(prefix))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	h = &harness{t: t, ctx: ctx}
	h.connectTo(other.URL)
	return h, proxy, cutOff, other
}

// TestASpaceLeavesAReplicaThatLostRedis: a replica cut off from Redis
// tells its watchers they are stale; a client given only that replica
// keeps its stream and reports Stale until the replica follows again, and
// a client given two moves to the other at once and keeps up with the
// writes made meanwhile. A client whose watch starts while the replica is
// cut off (its stream broke and it reconnects) is refused with
// Unavailable, and reports Stale too.
func TestASpaceLeavesAReplicaThatLostRedis(t *testing.T) {
	h, proxy, cutOff, other := replicasBehindAProxy(t)
	ctx := h.ctx
	toCutOff := faultproxy.NewHolder(t, cutOff.Addr) // between one client and the cut-off replica
	alone := h.clientAt(cutOff.URL, "alone", sdk.WithoutAssignments())
	reconnecting := h.clientAt("http://"+toCutOff.Addr, "reconnecting", sdk.WithoutAssignments())
	both := h.clientAt(cutOff.URL+","+other.URL, "both", sdk.WithoutAssignments())
	spaces := map[string]*sdk.Space{}
	for name, c := range map[string]*sdk.Client{"alone": alone, "reconnecting": reconnecting, "both": both} {
		sp, err := c.Space(ctx, "/st/")
		if err != nil {
			t.Fatal(err)
		}
		defer sp.Close()
		spaces[name] = sp
	}

	toCutOff.Partition() // the reconnecting client's stream breaks; it retries
	proxy.Partition()    // the replica loses Redis
	toCutOff.Heal()      // the retries reach the replica, which refuses the watch
	resp, err := h.kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/st/during", Value: []byte("v")}))
	if err != nil {
		t.Fatal(err)
	}
	during := resp.Msg.GetRevision()
	if err := spaces["both"].WaitRevision(ctx, during); err != nil {
		t.Fatalf("the client given two replicas did not get the write made during the cut: %v", err)
	}
	if both.Server() != other.URL {
		t.Fatalf("the client given two replicas uses %s, want %s", both.Server(), other.URL)
	}
	for _, name := range []string{"alone", "reconnecting"} {
		for !spaces[name].Stale() {
			select {
			case <-ctx.Done():
				t.Fatalf("the %s client never learnt the replica cannot follow the store", name)
			case <-time.After(10 * time.Millisecond):
			}
		}
		if _, ok := spaces[name].Get("/st/during"); ok {
			t.Fatalf("the cut-off replica delivered a write it cannot see to the %s client", name)
		}
	}
	proxy.Heal()
	for _, name := range []string{"alone", "reconnecting"} {
		if err := spaces[name].WaitRevision(ctx, during); err != nil {
			t.Fatalf("the %s client after healing: %v", name, err)
		}
		// The revision can arrive a moment before the space marks
		// itself fresh: await that, bounded by the test's context.
		for spaces[name].Stale() {
			select {
			case <-ctx.Done():
				t.Fatalf("the %s client is still stale after the replica caught up", name)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// TestAssignmentsMoveOffAReplicaThatLostRedis: an instance that follows
// its assignments on a replica cut off from Redis is told to go (its
// stream ends with Unavailable), resumes on the other replica, and
// applies and acknowledges a release cut there meanwhile.
func TestAssignmentsMoveOffAReplicaThatLostRedis(t *testing.T) {
	h, proxy, cutOff, other := replicasBehindAProxy(t)
	h.upload()
	c := h.clientAt(cutOff.URL+","+other.URL, "i0")
	h.waitRegistered("i0")
	rel1 := h.release(10, nil)
	has(t, c, rel1.GetGeneration())
	if c.Server() != cutOff.URL {
		t.Fatalf("the client moved to %s before the cut", c.Server())
	}

	proxy.Partition()
	rel2 := h.release(20, nil)
	h.awaitAcks(rel2.GetGeneration(), func(states map[string][]string) bool { return reported(states, "i0", "HEALTHY_ACKED") })
	has(t, c, rel2.GetGeneration())
	if c.Server() != other.URL {
		t.Fatalf("the client uses %s, want %s", c.Server(), other.URL)
	}
	// The cut-off replica's records of the session's last ACKs go in, and
	// it stops without waiting out their retries (10 s).
	proxy.Heal()
}
