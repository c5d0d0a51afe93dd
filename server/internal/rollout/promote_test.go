package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestALookupFencesAMoveInFlight looks the key of a Promote and of a
// Rollback up between the move's read and its write, as the CLI does after
// a lost answer: the lookup answers "not found", so the move in flight
// must fail and leave no receipt, and so must the same key sent again
// after the lookup (as a request delayed in the server would be); the
// move sent with a new key commits.
// (Before the fence, the move committed after the lookup had said it did
// not happen.)
func TestALookupFencesAMoveInFlight(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{"promote", "rollback"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			move := rollout.Move{ConfigID: "routing", IdempotencyKey: "k"}
			if kind == "promote" {
				rel := e.release(t, 50)
				ackAll(t, e, rel)
				move.To = rel.Generation
			} else {
				e.promoted(t, 50)
				e.promoted(t, 60)
				move.ExpectedGeneration, move.ExpectedEpoch = 2, 0
			}
			do := func(r *rollout.Rollouts) (rollout.Receipt, error) {
				if kind == "promote" {
					return r.Promote(ctx, move)
				}
				return r.Rollback(ctx, move)
			}
			var lookup error
			mover, hs := e.hooked(t, "/receipts/k", func() { _, lookup = e.rollouts.GetPromotion(ctx, "routing", "k") })
			rc, err := do(mover)
			if !hs.ran {
				t.Fatal("the lookup did not land between the move's read and its write")
			}
			if !errors.Is(lookup, rollout.ErrNoPromotion) {
				t.Fatalf("lookup while the move was in flight = %v, want not found", lookup)
			}
			if !errors.Is(err, rollout.ErrFenced) {
				t.Fatalf("the %s in flight after a lookup answered not found = %+v, %v; want ErrFenced", kind, rc, err)
			}
			if got, err := e.rollouts.GetPromotion(ctx, "routing", "k"); !errors.Is(err, rollout.ErrNoPromotion) {
				t.Fatalf("after the fenced %s, GetPromotion = %+v, %v; want not found", kind, got, err)
			}
			before := map[string]int64{"promote": 0, "rollback": 2}[kind]
			if ptr, err := e.rollouts.Pointer(ctx, "routing"); err != nil || ptr.Generation != before {
				t.Fatalf("pointer after the fenced %s = %+v, %v; want generation %d", kind, ptr, err, before)
			}
			// A move with the key that reaches the server after the
			// lookup is fenced too: "it did not happen" stays true.
			if rc, err := do(e.rollouts); !errors.Is(err, rollout.ErrFenced) {
				t.Fatalf("the same key sent after the lookup = %+v, %v; want ErrFenced", rc, err)
			}
			if ptr, err := e.rollouts.Pointer(ctx, "routing"); err != nil || ptr.Generation != before {
				t.Fatalf("pointer after the fenced key was sent again = %+v, %v; want generation %d", ptr, err, before)
			}
			// With a new key, the move happens.
			move.IdempotencyKey = "k2"
			rc, err = do(e.rollouts)
			if err != nil {
				t.Fatalf("the move with a new key = %v", err)
			}
			if got, err := e.rollouts.GetPromotion(ctx, "routing", "k2"); err != nil || got.To != rc.To || got.Revision != rc.Revision {
				t.Fatalf("GetPromotion after the retry = %+v, %v; want %+v", got, err, rc)
			}
			receipts, err := e.rollouts.Receipts(ctx, "routing")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range receipts {
				if r.IdempotencyKey == "" {
					t.Fatalf("Receipts lists a fence: %+v", r)
				}
			}
		})
	}
}

// TestALookupOfAConfigWithoutReleasesWritesNothing: nothing can be in
// flight for a config without releases, so its lookup fences nothing.
func TestALookupOfAConfigWithoutReleasesWritesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	before, err := e.store.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.GetPromotion(ctx, "nothing", "k"); !errors.Is(err, rollout.ErrNoPromotion) {
		t.Fatalf("GetPromotion = %v", err)
	}
	if _, err := e.rollouts.GetPromotion(ctx, "nothing", "bad key!"); !errors.Is(err, rollout.ErrInvalid) {
		t.Fatalf("GetPromotion of a malformed key = %v, want ErrInvalid", err)
	}
	after, err := e.store.Status(ctx)
	if err != nil || after.Revision != before.Revision {
		t.Fatalf("revision %d -> %d (%v): a lookup of a config without releases wrote", before.Revision, after.Revision, err)
	}
}

// TestPromoteRefusesAReleaseCutBeforeARollback: generation 3 was cut while
// 2 was active; after a rollback from 2 to 1 it must not be promoted over
// 1, neither when the rollback came first nor when it lands between
// Promote's read and write. A release cut on the active generation then
// promotes. (Before the recheck, 3 was promoted over 1.)
func TestPromoteRefusesAReleaseCutBeforeARollback(t *testing.T) {
	ctx := context.Background()
	for _, when := range []string{"before", "during"} {
		t.Run(when, func(t *testing.T) {
			e := newEnv(t)
			e.promoted(t, 10)
			e.promoted(t, 20)
			third := e.release(t, 30)
			ackAll(t, e, third)
			rollback := func() {
				if _, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 2, IdempotencyKey: "back"}); err != nil {
					t.Errorf("rollback: %v", err)
				}
			}
			promoter, move := e.rollouts, rollout.Move{ConfigID: "routing", To: 3, ExpectedGeneration: 1, ExpectedEpoch: 1, IdempotencyKey: "p3"}
			if when == "before" {
				rollback()
			} else {
				var hs *hookStore
				promoter, hs = e.hooked(t, "/active", rollback)
				move.ExpectedGeneration, move.ExpectedEpoch = 2, 0
				defer func() {
					if !hs.ran {
						t.Error("the rollback did not land between Promote's read and write")
					}
				}()
			}
			_, err := promoter.Promote(ctx, move)
			if when == "during" && errors.Is(err, rollout.ErrPointerMoved) {
				// The caller saw 2 at epoch 0: sent again from the pointer
				// as it is, the recheck must refuse it.
				move.ExpectedGeneration, move.ExpectedEpoch = 1, 1
				_, err = e.rollouts.Promote(ctx, move)
			}
			if !errors.Is(err, rollout.ErrNotReady) || !strings.Contains(err.Error(), "was cut while generation 2 was active") ||
				!strings.Contains(err.Error(), "create a new release on the active generation") {
				t.Fatalf("Promote of 3 after the rollback from 2 to 1 = %v", err)
			}
			if ptr, err := e.rollouts.Pointer(ctx, "routing"); err != nil || ptr.Generation != 1 {
				t.Fatalf("pointer = %+v, %v; want generation 1", ptr, err)
			}
			fourth := e.release(t, 40)
			ackAll(t, e, fourth)
			if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 4, ExpectedGeneration: 1, ExpectedEpoch: 1, IdempotencyKey: "p4"}); err != nil {
				t.Fatalf("Promote of 4, cut on the active generation 1 = %v", err)
			}
		})
	}
}

// TestARevokedGenerationIsNeverPromoted: a revoked candidate stops, shows
// as REVOKED and is refused by Promote, also when the revocation lands
// between Promote's read and write; bad revocations change nothing.
func TestARevokedGenerationIsNeverPromoted(t *testing.T) {
	ctx := context.Background()
	for _, when := range []string{"before", "during"} {
		t.Run(when, func(t *testing.T) {
			e := newEnv(t)
			rel := e.release(t, 50)
			ackAll(t, e, rel)
			revoke := func() {
				if _, err := e.rollouts.Revoke(ctx, "routing", 1, "leaks a secret", "sec-oncall"); err != nil {
					t.Errorf("revoke: %v", err)
				}
			}
			promoter := e.rollouts
			if when == "before" {
				revoke()
			} else {
				var hs *hookStore
				promoter, hs = e.hooked(t, "/active", revoke)
				defer func() {
					if !hs.ran {
						t.Error("the revocation did not land between Promote's read and write")
					}
				}()
			}
			_, err := promoter.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p"})
			if !errors.Is(err, rollout.ErrNotReady) {
				t.Fatalf("Promote of a revoked generation = %v", err)
			}
			if promoted, stopped := e.outcome(t, 1); promoted || !stopped {
				t.Fatalf("promoted %v, stopped %v: a revoked candidate's rollout stops", promoted, stopped)
			}
			if got := e.state(t, rel); got != rollout.StateRevoked {
				t.Fatalf("state = %s, want REVOKED", got)
			}
			rv, err := e.rollouts.GetRevocation(ctx, "routing", 1)
			if err != nil || rv == nil || rv.Actor != "sec-oncall" || rv.Reason != "leaks a secret" {
				t.Fatalf("revocation = %+v, %v", rv, err)
			}
			if _, err := e.rollouts.Revoke(ctx, "routing", 1, "again", "x"); !errors.Is(err, rollout.ErrAlreadyRevoked) {
				t.Fatalf("second revocation = %v", err)
			}
		})
	}
}

// TestRevokeRefusesTheActiveGenerationAndBadRequests: the active
// generation is rolled back first; a revocation needs a reason and a
// release; none of these writes anything.
func TestRevokeRefusesTheActiveGenerationAndBadRequests(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.promoted(t, 10)
	e.promoted(t, 20)
	before, err := e.store.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Revoke(ctx, "routing", 2, "bad", "x"); !errors.Is(err, rollout.ErrNotReady) || !strings.Contains(err.Error(), "roll back first") {
		t.Fatalf("revoking the active generation = %v", err)
	}
	if _, err := e.rollouts.Revoke(ctx, "routing", 1, "", "x"); !errors.Is(err, rollout.ErrInvalid) {
		t.Fatalf("revoking without a reason = %v", err)
	}
	if _, err := e.rollouts.Revoke(ctx, "routing", 9, "bad", "x"); !errors.Is(err, release.ErrNotFound) {
		t.Fatalf("revoking an unknown generation = %v", err)
	}
	if after, err := e.store.Status(ctx); err != nil || after.Revision != before.Revision {
		t.Fatalf("revision %d -> %d (%v): a refused revocation wrote", before.Revision, after.Revision, err)
	}
	// Once rolled back off it, it can be revoked: its state says so.
	if _, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 2, IdempotencyKey: "back"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Revoke(ctx, "routing", 2, "bad", "x"); err != nil {
		t.Fatalf("revoking the rolled-back generation = %v", err)
	}
	// A revoked generation is never rolled back to either.
	e.promoted(t, 30)
	if _, err := e.rollouts.Revoke(ctx, "routing", 1, "leaks a token", "sec"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 3, ExpectedEpoch: 1, IdempotencyKey: "back-again"}); !errors.Is(err, rollout.ErrCannotRollBack) ||
		!strings.Contains(err.Error(), "generation 1, which generation 3 replaced, was revoked") {
		t.Fatalf("rollback onto a revoked generation = %v", err)
	}
	rel, err := e.releases.Get(ctx, "routing", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.state(t, rel); got != rollout.StateRevoked {
		t.Fatalf("state = %s, want REVOKED", got)
	}
}

// everyTxnStore runs hook before every transaction that writes a key with
// the suffix, in the caller's goroutine, and counts them.
type everyTxnStore struct {
	store.Store
	suffix string
	hook   func(n int)
	n      int
}

func (s *everyTxnStore) Txn(ctx context.Context, t store.Txn) (store.Result, error) {
	for _, p := range t.Puts {
		if strings.HasSuffix(p.Key, s.suffix) {
			s.n++
			s.hook(s.n)
			break
		}
	}
	return s.Store.Txn(ctx, t)
}

// TestReportsThatChangeNothingDoNotStarvePromote lands, between every
// attempt's read and write, what a fleet does all the time: an instance
// outside the membership registers and reports, a member reports again
// (a duplicate), another reports a digest that is not the release's, and
// a third reports healthy at a new apply sequence (counted, and healthy
// as before). None of it changes what Promote decides on, so the first
// attempt commits. (Before, each attempt was invalidated, and Promote gave up
// "contended" after 16.)
func TestReportsThatChangeNothingDoNotStarvePromote(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	rel := e.release(t, 50)
	ackAll(t, e, rel)
	es := &everyTxnStore{Store: e.store, suffix: "/active"}
	es.hook = func(n int) {
		id := fmt.Sprintf("new-%d", n)
		e.register(t, id, "boot-1", "zone-a")
		for _, a := range []rollout.Ack{
			e.ack(t, rel, id, "boot-1", 1, rollout.Applied),
			e.ack(t, rel, "i0", "boot-1", rel.Generation, rollout.HealthyAcked),
			e.ack(t, rel, "i1", "boot-1", rel.Generation+1, rollout.Downloaded, func(a *rollout.Ack) { a.ContentDigest = "sha256:other" }),
		} {
			if a.Counted {
				t.Errorf("%s's %s counted; the test needs reports that do not", a.WorkloadIdentity, a.State)
			}
		}
		// A counted report that leaves i2 healthy: a new apply, healthy
		// again (the release has no health window).
		if a := e.ack(t, rel, "i2", "boot-1", rel.Generation+int64(n), rollout.HealthyAcked); !a.Counted {
			t.Errorf("i2's healthy report at a new apply sequence did not count: %s", a.Why)
		}
	}
	promoter := run(t, rollout.New(es, e.releases, e.registry, rollout.WithClock(e.clock.Now)))
	rc, err := promoter.Promote(ctx, rollout.Move{ConfigID: "routing", To: rel.Generation, IdempotencyKey: "p"})
	if err != nil || rc.To != rel.Generation {
		t.Fatalf("Promote under reports that change nothing = %+v, %v (after %d attempts)", rc, err, es.n)
	}
	if es.n != 1 {
		t.Fatalf("Promote wrote %d times; the reports between its read and write change nothing it decides on", es.n)
	}
}

// TestAMemberThatRestartsBeforePromoteCommitsIsRecounted: a frozen
// member's new registration between Promote's read and write resets its
// state, so Promote decides again and finds the stage waiting.
func TestAMemberThatRestartsBeforePromoteCommitsIsRecounted(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	rel := e.release(t, 50)
	ackAll(t, e, rel)
	promoter, hs := e.hooked(t, "/active", func() { e.register(t, "i0", "boot-2", "zone-a") })
	_, err := promoter.Promote(ctx, rollout.Move{ConfigID: "routing", To: rel.Generation, IdempotencyKey: "p"})
	if !hs.ran {
		t.Fatal("the restart did not land between Promote's read and write")
	}
	if !errors.Is(err, rollout.ErrNotReady) || !strings.Contains(err.Error(), "zone-a") {
		t.Fatalf("Promote after a member restarted = %v; want the stage waiting on zone-a", err)
	}
}

// TestPromoteNeedsEveryMemberToReportWhatItRuns: two members restarted
// and have not reported what they run since; the stage that counts only
// zone-a passes, but Promote is refused and status names the two, until
// one reports and the other is retired. A release that names a lower
// coverage promotes without them. (Before the gate, the release promoted
// with 4 of 6 members reporting.)
func TestPromoteNeedsEveryMemberToReportWhatItRuns(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	first := e.promoted(t, 10)
	e.register(t, "i4", "boot-2", "zone-b")
	e.register(t, "i5", "boot-2", "zone-c")
	zoneA := func(s *release.Spec) {
		s.Stages = []release.Stage{{Name: "a", Selector: map[string]string{"zone": "zone-a"}, Policy: quorum.Policy{Kind: quorum.All}}}
	}
	rel := e.releaseWith(t, 20, zoneA)
	e.ack(t, rel, "i0", "boot-1", 2, rollout.HealthyAcked)
	e.ack(t, rel, "i3", "boot-1", 2, rollout.HealthyAcked)
	st, err := e.rollouts.Status(ctx, "routing", rel.Generation)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Coverage; c.Reported != 4 || c.Required != 6 || c.Met() || strings.Join(c.Missing, ",") != "i4,i5" ||
		!strings.Contains(c.String(), "promote needs 6 to have reported (missing: i4, i5)") {
		t.Fatalf("coverage = %+v (%s); want i4 and i5 missing", c, c)
	}
	if st.Stages[0].Evaluation.Outcome != quorum.Passed {
		t.Fatalf("stage a = %+v; the test needs it passed", st.Stages[0].Evaluation)
	}
	move := rollout.Move{ConfigID: "routing", To: rel.Generation, ExpectedGeneration: first.Generation, IdempotencyKey: "p2"}
	_, err = e.rollouts.Promote(ctx, move)
	if !errors.Is(err, rollout.ErrNotReady) || !strings.Contains(err.Error(), "4 of 6 members reported what they run, and the release needs 6") ||
		!strings.Contains(err.Error(), "missing: i4, i5") {
		t.Fatalf("Promote with two members silent = %v", err)
	}
	// i4 reports the generation it runs since its restart; i5 is gone.
	e.ack(t, first, "i4", "boot-2", 1, rollout.Applied)
	if _, err := e.rollouts.Retire(ctx, "routing", rel.Generation, "i5", "host gone", "oncall"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Promote(ctx, move); err != nil {
		t.Fatalf("Promote once every unretired member reported = %v", err)
	}

	// A release that names half the members as enough coverage.
	e.register(t, "i2", "boot-2", "zone-c")
	e.register(t, "i4", "boot-3", "zone-b")
	half := e.releaseWith(t, 30, func(s *release.Spec) {
		zoneA(s)
		f := 0.5
		s.MinCoverage = &f
	})
	e.ack(t, half, "i0", "boot-1", 3, rollout.HealthyAcked)
	e.ack(t, half, "i3", "boot-1", 3, rollout.HealthyAcked)
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: half.Generation, ExpectedGeneration: rel.Generation, IdempotencyKey: "p3"}); err != nil {
		t.Fatalf("Promote of a release with min coverage 0.5, 3 of 6 reporting = %v", err)
	}
}

// TestMinCoverageOutsideZeroToOneIsRefused: a bad minimum coverage never
// becomes a release.
func TestMinCoverageOutsideZeroToOneIsRefused(t *testing.T) {
	e := newEnv(t)
	for _, f := range []float64{-0.1, 1.5, math.NaN(), math.Inf(1)} {
		spec := release.Spec{ConfigID: "routing", MediaType: "application/json", ValidatorDigest: e.digest, Content: []byte(`{"upstreams":[{"host":"a","weight":100}]}`),
			Stages: []release.Stage{{Name: "all", Policy: quorum.Policy{Kind: quorum.All}}}, Deadline: time.Hour, MinCoverage: &f}
		if _, err := e.releases.Create(context.Background(), spec, "ci"); !errors.Is(err, release.ErrInvalid) || !strings.Contains(err.Error(), "min coverage") {
			t.Fatalf("min coverage %v = %v", f, err)
		}
	}
}
