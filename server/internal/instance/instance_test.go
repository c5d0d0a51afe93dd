package instance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLeasesAndMembership(t *testing.T) {
	st, err := boltstore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	r, err := New(ctx, st, 30*time.Second, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	epochs := map[string]int64{}
	for _, in := range []Instance{
		{WorkloadIdentity: "a", BootID: "1", Zone: "z1", Labels: map[string]string{"env": "prod"}, TrafficWeight: 2},
		{WorkloadIdentity: "b", BootID: "1", Zone: "z2", Labels: map[string]string{"env": "prod"}},
		{WorkloadIdentity: "c", BootID: "1", Zone: "z1", Labels: map[string]string{"env": "dev"}},
	} {
		rec, err := r.Register(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		epochs[in.WorkloadIdentity] = rec.MembershipEpoch
	}
	if !(0 < epochs["a"] && epochs["a"] < epochs["b"] && epochs["b"] < epochs["c"]) {
		t.Fatalf("membership epochs = %v; each registration gets a higher one", epochs)
	}
	now = now.Add(20 * time.Second)
	// A heartbeat renews the lease and keeps the registration's epoch; it
	// takes no store revision.
	before, _ := st.Status(ctx)
	if rec, err := r.Heartbeat(ctx, "a", "1"); err != nil || rec.MembershipEpoch != epochs["a"] || !rec.LeaseExpiresAt.Equal(now.Add(30*time.Second)) {
		t.Fatalf("Heartbeat = %+v, %v", rec, err)
	}
	if after, _ := st.Status(ctx); after.Revision != before.Revision {
		t.Fatalf("a heartbeat moved the revision from %d to %d", before.Revision, after.Revision)
	}
	if rec, err := r.Get(ctx, "a"); err != nil || rec.MembershipEpoch != epochs["a"] || !rec.Live(now.Add(25*time.Second)) {
		t.Fatalf("Get after the heartbeat = %+v, %v", rec, err)
	}
	now = now.Add(20 * time.Second) // b's lease (30s) has expired, a's was renewed
	members, epoch, err := r.Members(ctx, map[string]string{"env": "prod"})
	status, _ := st.Status(ctx)
	if err != nil || len(members) != 1 || members[0].ID != "a" || members[0].Weight != 2 || epoch != status.Revision {
		t.Fatalf("Members = %+v at epoch %d, %v", members, epoch, err)
	}
	all, _, err := r.Members(ctx, nil)
	if err != nil || len(all) != 1 {
		t.Fatalf("Members(all) = %+v, %v", all, err)
	}
	recs, err := r.List(ctx)
	if err != nil || len(recs) != 3 || recs[1].Live(now) {
		t.Fatalf("List = %+v, %v; the expired record stays, not live", recs, err)
	}
	// A restart re-registers with a new boot and a new epoch; the old
	// boot's heartbeat fails.
	if rec, err := r.Register(ctx, Instance{WorkloadIdentity: "a", BootID: "2", Zone: "z1"}); err != nil || rec.MembershipEpoch <= epochs["c"] {
		t.Fatalf("re-Register = %+v, %v", rec, err)
	}
	if _, err := r.Heartbeat(ctx, "a", "1"); !errors.Is(err, ErrStaleBoot) {
		t.Fatalf("old boot heartbeat = %v", err)
	}
	if _, err := r.Heartbeat(ctx, "zz", "1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown heartbeat = %v", err)
	}
	if _, err := r.Register(ctx, Instance{WorkloadIdentity: "", BootID: "1"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty identity = %v", err)
	}
}

// registerBetweenPages registers instances (through reg) while the second
// page of registrations is being read, once.
type registerBetweenPages struct {
	store.Store
	once sync.Once
	hook func()
}

func (s *registerBetweenPages) List(ctx context.Context, prefix string, revision int64, after string, limit int) (store.Page, error) {
	if prefix == RegistrationPrefix && after != "" {
		s.once.Do(s.hook)
	}
	return s.Store.List(ctx, prefix, revision, after, limit)
}

// TestAFreezeOfManyInstancesIsOneSnapshot freezes 1,500 instances (two
// pages) while two more register between the pages, one sorting into the
// first page and one into the second: neither is a member, both have a
// higher epoch than the freeze, and every earlier one is a member.
func TestAFreezeOfManyInstancesIsOneSnapshot(t *testing.T) {
	st, err := boltstore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	plain, err := New(ctx, st, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1500
	for i := range n {
		if _, err := plain.Register(ctx, Instance{WorkloadIdentity: fmt.Sprintf("i-%05d", i*2), BootID: "1"}); err != nil {
			t.Fatal(err)
		}
	}
	hooked := &registerBetweenPages{Store: st}
	var racers []Record
	hooked.hook = func() {
		for _, id := range []string{"i-00001", fmt.Sprintf("i-%05d", 2*n-3)} {
			rec, err := plain.Register(ctx, Instance{WorkloadIdentity: id, BootID: "1"})
			if err != nil {
				t.Error(err)
			}
			racers = append(racers, rec)
		}
	}
	if err := plain.Checkpoint(ctx); err != nil { // the second registry loads the leases
		t.Fatal(err)
	}
	frozen, err := New(ctx, hooked, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	members, epoch, err := frozen.Members(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(racers) != 2 {
		t.Fatal("the registrations between the pages did not happen")
	}
	if len(members) != n {
		t.Fatalf("froze %d members, want the %d registered before the freeze", len(members), n)
	}
	for _, m := range members {
		if m.ID == racers[0].WorkloadIdentity || m.ID == racers[1].WorkloadIdentity {
			t.Fatalf("%s registered after the freeze began and is a member", m.ID)
		}
		if !strings.HasPrefix(m.ID, "i-") {
			t.Fatalf("unexpected member %s", m.ID)
		}
	}
	for _, rec := range racers {
		if rec.MembershipEpoch <= epoch {
			t.Fatalf("%s registered at epoch %d, not after the freeze's epoch %d", rec.WorkloadIdentity, rec.MembershipEpoch, epoch)
		}
	}
}

// TestLeasesSurviveARestart: leases are checkpointed beside the key space
// and loaded by the next registry on the same store. One that was live at
// its checkpoint gets a full term from the restart (its instance could not
// reach a stopped server); one that had expired stays expired.
func TestLeasesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := boltstore.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	r, err := New(ctx, st, 30*time.Second, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"alive", "dead"} {
		if _, err := r.Register(ctx, Instance{WorkloadIdentity: id, BootID: "1"}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(40 * time.Second) // both expire; only "alive" heartbeats
	if _, err := r.Heartbeat(ctx, "alive", "1"); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(runCtx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	stop() // Run's last checkpoint writes what changed
	<-done
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	now = now.Add(25 * time.Second) // the server was down for 25 s
	st, err = boltstore.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	again, err := New(ctx, st, 30*time.Second, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	alive, err := again.Get(ctx, "alive")
	if err != nil || !alive.Live(now.Add(29*time.Second)) {
		t.Fatalf("after the restart alive = %+v, %v; want a full term from the restart", alive, err)
	}
	dead, err := again.Get(ctx, "dead")
	if err != nil || dead.Live(now) {
		t.Fatalf("after the restart dead = %+v, %v; want expired", dead, err)
	}
}

// TestAHeartbeatRacingARegistrationLoses: the old boot's heartbeat that
// read the registration before the new boot registered does not renew the
// old boot's lease over the new one.
func TestAHeartbeatRacingARegistrationLoses(t *testing.T) {
	st, err := boltstore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	r, err := New(ctx, st, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	old, err := r.Register(ctx, Instance{WorkloadIdentity: "i", BootID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, Instance{WorkloadIdentity: "i", BootID: "2"}); err != nil {
		t.Fatal(err)
	}
	// What the old heartbeat would do after reading the old registration.
	if exp := r.renew("i", "1", old.MembershipEpoch); !exp.IsZero() {
		t.Fatal("the old registration's lease was renewed over the new one")
	}
	if rec, err := r.Get(ctx, "i"); err != nil || rec.BootID != "2" || !rec.Live(time.Now()) {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
}

// countingStore counts the leases each checkpoint writes.
type countingStore struct {
	store.Store
	mu      sync.Mutex
	written []string
}

func (s *countingStore) PutRecords(ctx context.Context, kind string, recs []store.Record) error {
	s.mu.Lock()
	for _, r := range recs {
		s.written = append(s.written, r.ID)
	}
	s.mu.Unlock()
	return s.Store.PutRecords(ctx, kind, recs)
}

func (s *countingStore) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.written
	s.written = nil
	return out
}

// TestAStreamHoldsALeaseAndCheckpointsAreRare: an open stream keeps its
// instance live with no heartbeat, and when it ends the instance has a full
// term to come back; a stale boot cannot hold. A lease renewed every few
// seconds is written about once per term, and an expired one once.
func TestAStreamHoldsALeaseAndCheckpointsAreRare(t *testing.T) {
	st, err := boltstore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	counting := &countingStore{Store: st}
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := New(ctx, counting, 30*time.Second, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"streaming", "beating", "gone"} {
		if _, err := r.Register(ctx, Instance{WorkloadIdentity: id, BootID: "1"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Hold(ctx, "streaming", "0"); !errors.Is(err, ErrStaleBoot) {
		t.Fatalf("a hold by another boot = %v", err)
	}
	release, err := r.Hold(ctx, "streaming", "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counting.take(); len(got) != 3 {
		t.Fatalf("the first checkpoint wrote %v, want every new lease", got)
	}
	var writes []string
	for range 30 { // five minutes, a heartbeat every 10 s, a checkpoint each time
		now = now.Add(10 * time.Second)
		if _, err := r.Heartbeat(ctx, "beating", "1"); err != nil {
			t.Fatal(err)
		}
		if err := r.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
		writes = append(writes, counting.take()...)
	}
	counts := map[string]int{}
	for _, id := range writes {
		counts[id]++
	}
	// A lease is written when its stored copy would lapse within half a
	// term: every 20 s here, not every heartbeat. "gone" expired: written
	// once more, so that a restart does not revive it.
	if counts["beating"] > 16 || counts["streaming"] > 16 || counts["gone"] != 1 {
		t.Fatalf("five minutes of checkpoints wrote %v", counts)
	}
	if rec, _ := r.Get(ctx, "streaming"); !rec.Live(now) {
		t.Fatal("the held lease lapsed without heartbeats")
	}
	if rec, _ := r.Get(ctx, "gone"); rec.Live(now) {
		t.Fatal("the lease nobody renewed is live")
	}
	release()
	release() // idempotent
	now = now.Add(29 * time.Second)
	if rec, _ := r.Get(ctx, "streaming"); !rec.Live(now) {
		t.Fatal("after the stream ended the instance did not get a full term")
	}
	now = now.Add(2 * time.Second)
	if rec, _ := r.Get(ctx, "streaming"); rec.Live(now) {
		t.Fatal("the released lease outlived its term")
	}
}
