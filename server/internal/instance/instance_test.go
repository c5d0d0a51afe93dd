package instance

import (
	"context"
	"errors"
	"fmt"
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
	r := New(st, 30*time.Second)
	r.now = func() time.Time { return now }
	ctx := context.Background()
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
	// A heartbeat renews the lease and keeps the registration's epoch.
	if rec, err := r.Heartbeat(ctx, "a", "1"); err != nil || rec.MembershipEpoch != epochs["a"] || !rec.LeaseExpiresAt.Equal(now.Add(30*time.Second)) {
		t.Fatalf("Heartbeat = %+v, %v", rec, err)
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
	if prefix == registrationPrefix && after != "" {
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
	plain := New(st, time.Hour)
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
	members, epoch, err := New(hooked, time.Hour).Members(ctx, nil)
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
