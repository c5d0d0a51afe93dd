package release_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/sdk/canonical"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/validators/host"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		os.Exit(code)
	}))
}

type fixture struct {
	store    *boltstore.Store
	releases *release.Releases
	digest   string
	mu       sync.Mutex
	members  []quorum.Member
}

// newFixture runs the real routing validator in a real runtime over a real
// store.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := boltstore.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	v := wasmbuild.Load(t, "routing")
	f := &fixture{store: st, digest: v.Info().Digest, members: []quorum.Member{
		{ID: "i1", Zone: "a", Role: "worker", Weight: 1}, {ID: "i2", Zone: "b", Role: "worker", Weight: 1},
	}}
	validate := func(ctx context.Context, digest string, in host.Input) (host.Result, error) {
		if digest != f.digest {
			return host.Result{}, fmt.Errorf("unknown validator %s", digest)
		}
		return v.Validate(ctx, in)
	}
	members := func(context.Context, map[string]string) ([]quorum.Member, int64, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Clone(f.members), int64(len(f.members)), nil
	}
	f.releases = release.New(st, validate, members)
	return f
}

const goodTable = `{"upstreams": [{"host": "a", "weight": 60}, {"host": "b", "weight": 40}]}`

func (f *fixture) spec(content string) release.Spec {
	return release.Spec{
		ConfigID: "payments.routing", Content: []byte(content), MediaType: "application/json",
		ValidatorDigest: f.digest,
		Stages: []release.Stage{
			{Name: "canary", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.5}},
			{Name: "all-zones", Policy: quorum.Policy{Kind: quorum.ZoneQuorum, Fraction: 1}},
		},
		HealthWindow: time.Minute, Deadline: time.Hour,
	}
}

func TestCreateAssignsGenerationsAndFreezesMembership(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	first, err := f.releases.Create(ctx, f.spec(goodTable), "alice")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := canonical.Digest("application/json", []byte(goodTable))
	if first.Generation != 1 || first.Predecessor != 0 || first.State != release.StateCandidate ||
		first.ContentDigest != want || len(first.Membership) != 2 || first.CreatedBy != "alice" {
		t.Fatalf("first release = %+v", first)
	}
	// Instances that register later are not in the frozen snapshot.
	f.mu.Lock()
	f.members = append(f.members, quorum.Member{ID: "late", Zone: "c"})
	f.mu.Unlock()
	second, err := f.releases.Create(ctx, f.spec(`{"upstreams":[{"host":"a","weight":100}]}`), "bob")
	if err != nil || second.Generation != 2 || second.Predecessor != 1 || len(second.Membership) != 3 {
		t.Fatalf("second release = %+v, %v", second, err)
	}
	got, err := f.releases.Get(ctx, "payments.routing", 1)
	if err != nil || got.ContentDigest != first.ContentDigest || len(got.Membership) != 2 || got.Revision != first.Revision {
		t.Fatalf("Get(1) = %+v, %v", got, err)
	}
	list, err := f.releases.List(ctx, "payments.routing")
	if err != nil || len(list) != 2 || list[0].Generation != 1 || list[1].Generation != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if _, err := f.releases.Get(ctx, "payments.routing", 3); !errors.Is(err, release.ErrNotFound) {
		t.Fatalf("Get(3) = %v", err)
	}
}

func TestRejectedContentNeverBecomesARelease(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, err := f.releases.Create(ctx, f.spec(`{"upstreams":[{"host":"a","weight":60},{"host":"a","weight":30}]}`), "alice")
	var rejected *release.RejectedError
	if !errors.As(err, &rejected) || len(rejected.Violations) != 2 || rejected.Violations[0].Path != "/upstreams/1/host" {
		t.Fatalf("Create of a bad table = %v", err)
	}
	if list, _ := f.releases.List(ctx, "payments.routing"); len(list) != 0 {
		t.Fatalf("a rejected config was stored: %+v", list)
	}
	if st, _ := f.store.Status(ctx); st.Revision != 0 {
		t.Fatalf("a rejected create moved the revision to %d", st.Revision)
	}
}

func TestInvalidSpecsAreRefused(t *testing.T) {
	f := newFixture(t)
	for name, mutate := range map[string]func(*release.Spec){
		"bad config ID":   func(s *release.Spec) { s.ConfigID = "Payments/Routing" },
		"no validator":    func(s *release.Spec) { s.ValidatorDigest = "" },
		"no stages":       func(s *release.Spec) { s.Stages = nil },
		"duplicate stage": func(s *release.Spec) { s.Stages[1].Name = "canary" },
		"bad policy":      func(s *release.Spec) { s.Stages[0].Policy.Fraction = 0 },
		"no deadline":     func(s *release.Spec) { s.Deadline = 0 },
		"JSON not JSON":   func(s *release.Spec) { s.Content = []byte("{") },
		"duplicate keys":  func(s *release.Spec) { s.Content = []byte(`{"upstreams":[],"upstreams":[]}`) },
	} {
		t.Run(name, func(t *testing.T) {
			s := f.spec(goodTable)
			mutate(&s)
			if _, err := f.releases.Create(context.Background(), s, "alice"); !errors.Is(err, release.ErrInvalid) {
				t.Fatalf("Create = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestConcurrentCreatesGetDistinctGenerations(t *testing.T) {
	f := newFixture(t)
	const creators = 12
	var wg sync.WaitGroup
	gens := make(chan int64, creators)
	for range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, err := f.releases.Create(context.Background(), f.spec(goodTable), "ci")
			if err != nil {
				t.Error(err)
				return
			}
			gens <- rel.Generation
		}()
	}
	wg.Wait()
	close(gens)
	var got []int64
	for g := range gens {
		got = append(got, g)
	}
	slices.Sort(got)
	for i, g := range got {
		if g != int64(i+1) {
			t.Fatalf("generations %v are not 1..%d", got, creators)
		}
	}
	list, err := f.releases.List(context.Background(), "payments.routing")
	if err != nil || len(list) != creators {
		t.Fatalf("List = %d releases, %v", len(list), err)
	}
	for i, rel := range list {
		if rel.Predecessor != int64(i) {
			t.Fatalf("generation %d has predecessor %d", rel.Generation, rel.Predecessor)
		}
	}
}
