package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// hookStore runs hook once, just before the first transaction that writes
// a key with the suffix, in the caller's goroutine: the hook's writes land
// between what the caller read and what it commits.
type hookStore struct {
	store.Store
	suffix string
	once   sync.Once
	ran    bool
	hook   func()
}

func (s *hookStore) Txn(ctx context.Context, t store.Txn) (store.Result, error) {
	for _, p := range t.Puts {
		if strings.Contains(p.Key, s.suffix) {
			s.once.Do(func() { s.ran = true; s.hook() })
		}
	}
	return s.Store.Txn(ctx, t)
}

// hooked returns Rollouts whose writes of keys containing suffix run hook
// first.
func (e *env) hooked(t *testing.T, suffix string, hook func()) (*rollout.Rollouts, *hookStore) {
	hs := &hookStore{Store: e.store, suffix: suffix, hook: hook}
	return run(t, rollout.New(hs, e.releases, e.registry, rollout.WithClock(e.clock.Now))), hs
}

// stopKinds are the three ways a rollout stops: by hand, by a rejection
// past the stage's threshold, and by its deadline (the supervisor's
// Settle after the clock passed it). Each runs on the env's plain
// Rollouts.
var stopKinds = map[string]func(t *testing.T, e *env, rel release.Release) error{
	"manual": func(t *testing.T, e *env, rel release.Release) error {
		_, err := e.rollouts.StopRollout(context.Background(), "routing", rel.Generation, "racing", "oncall")
		return err
	},
	"rejection": func(t *testing.T, e *env, rel release.Release) error {
		reg, err := e.registry.Get(context.Background(), "i0")
		if err != nil {
			return err
		}
		_, err = e.rollouts.RecordAck(context.Background(), rollout.Ack{ConfigID: "routing", Generation: rel.Generation, WorkloadIdentity: "i0",
			BootID: "boot-1", MembershipEpoch: reg.MembershipEpoch, ApplySequence: rel.Generation + 1, ContentDigest: rel.ContentDigest,
			ValidatorDigest: rel.ValidatorDigest, State: rollout.Rejected, Reason: "racing"})
		return err
	},
	"deadline": func(t *testing.T, e *env, rel release.Release) error {
		e.clock.Advance(2 * time.Hour)
		return e.rollouts.Settle(context.Background(), "routing", rel.Generation)
	},
}

// outcome reads whether generation gen ended promoted and whether stopped,
// and fails the test if both.
func (e *env) outcome(t *testing.T, gen int64) (promoted, stopped bool) {
	t.Helper()
	ctx := context.Background()
	stop, err := e.rollouts.GetStop(ctx, "routing", gen)
	if err != nil {
		t.Fatal(err)
	}
	ptr, err := e.rollouts.Pointer(ctx, "routing")
	if err != nil {
		t.Fatal(err)
	}
	promoted, stopped = ptr.Generation == gen, stop != nil
	if promoted && stopped {
		t.Fatalf("generation %d is both active and stopped (%s)", gen, stop.Reason)
	}
	return promoted, stopped
}

// TestAStopBetweenPromotesReadAndWriteWins lands each kind of stop after
// Promote decided and before it commits: Promote decides again and is
// refused. (Before the fix Promote committed over the stop record.)
func TestAStopBetweenPromotesReadAndWriteWins(t *testing.T) {
	for kind, stop := range stopKinds {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			rel := e.release(t, 50)
			ackAll(t, e, rel)
			promoter, hs := e.hooked(t, "/active", func() {
				if err := stop(t, e, rel); err != nil {
					t.Errorf("stop: %v", err)
				}
			})
			_, err := promoter.Promote(context.Background(), rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p"})
			if !hs.ran {
				t.Fatal("the stop did not land between Promote's read and write")
			}
			if !errors.Is(err, rollout.ErrNotReady) {
				t.Fatalf("Promote after the stop landed = %v", err)
			}
			if promoted, stopped := e.outcome(t, 1); promoted || !stopped {
				t.Fatalf("promoted %v, stopped %v", promoted, stopped)
			}
		})
	}
}

// TestAPromoteBetweenAStopsReadAndWriteWins lands a Promote after each
// kind of stop decided and before it writes: the stop decides again and
// finds the release promoted. (Before the fix the stop record was written
// over the promotion.)
func TestAPromoteBetweenAStopsReadAndWriteWins(t *testing.T) {
	ctx := context.Background()
	promote := func(t *testing.T, e *env) {
		if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p"}); err != nil {
			t.Errorf("promote: %v", err)
		}
	}
	for kind, race := range map[string]func(t *testing.T, e *env, rel release.Release) *hookStore{
		"manual": func(t *testing.T, e *env, rel release.Release) *hookStore {
			stopper, hs := e.hooked(t, "/stops/", func() { promote(t, e) })
			_, err := stopper.StopRollout(ctx, "routing", 1, "racing", "oncall")
			if !errors.Is(err, rollout.ErrNotReady) || !strings.Contains(err.Error(), "roll back instead") {
				t.Fatalf("StopRollout after the promotion landed = %v", err)
			}
			return hs
		},
		// The rejection is judged while the release is a candidate, and
		// stored after the promotion: it is judged again, as the active
		// release's health, and stops nothing.
		"rejection": func(t *testing.T, e *env, rel release.Release) *hookStore {
			stopper, hs := e.hooked(t, "/acks/", func() { promote(t, e) })
			reg, _ := e.registry.Get(ctx, "i0")
			a, err := stopper.RecordAck(ctx, rollout.Ack{ConfigID: "routing", Generation: 1, WorkloadIdentity: "i0", BootID: "boot-1",
				MembershipEpoch: reg.MembershipEpoch, ApplySequence: 2, ContentDigest: rel.ContentDigest,
				ValidatorDigest: rel.ValidatorDigest, State: rollout.Rejected})
			if err != nil || !a.Counted {
				t.Fatalf("the rejection = %+v, %v", a, err)
			}
			return hs
		},
		// The supervisor's Settle decides after the deadline; the
		// promotion decided before it and commits first.
		"deadline": func(t *testing.T, e *env, rel release.Release) *hookStore {
			stopper, hs := e.hooked(t, "/stops/", func() {
				e.clock.Advance(-2 * time.Hour)
				promote(t, e)
				e.clock.Advance(2 * time.Hour)
			})
			e.clock.Advance(2 * time.Hour)
			if err := stopper.Settle(ctx, "routing", 1); err != nil {
				t.Fatal(err)
			}
			return hs
		},
	} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			rel := e.release(t, 50)
			ackAll(t, e, rel)
			if hs := race(t, e, rel); !hs.ran {
				t.Fatal("the promotion did not land between the stop's read and write")
			}
			if promoted, stopped := e.outcome(t, 1); !promoted || stopped {
				t.Fatalf("promoted %v, stopped %v", promoted, stopped)
			}
		})
	}
}

// TestPromoteRacingEachStopEndsOneWay races Promote against each kind of
// stop, run after run, with no hook: every run ends promoted and not
// stopped, or stopped and not promoted, and each side must win some runs
// (a race one side always wins proves nothing about the other). Each run
// gives one side a head start of a few yields, alternating, so both
// outcomes come soon; a side that never wins in maxRuns fails the test.
// The clock only moves forward, as a real one does: the deadline stop
// passes each release's deadline, and the instances renew their leases.
func TestPromoteRacingEachStopEndsOneWay(t *testing.T) {
	minRuns, maxRuns := 25, 200
	if testing.Short() {
		minRuns = 5
	}
	for kind, stop := range stopKinds {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			counts := map[string]int{}
			for i := 0; i < maxRuns && (i < minRuns || counts["promoted"] == 0 || counts["stopped"] == 0); i++ {
				rel := e.release(t, 10+i%80)
				ackAll(t, e, rel)
				ptr, err := e.rollouts.Pointer(ctx, "routing")
				if err != nil {
					t.Fatal(err)
				}
				// headStart yields k times when it is this side's turn to
				// wait, so that the other side tends to go first.
				k := i % 4
				headStart := func(wait bool) {
					if wait {
						for range k {
							runtime.Gosched()
						}
					}
				}
				begin := make(chan struct{})
				var wg sync.WaitGroup
				wg.Add(2)
				go func() {
					defer wg.Done()
					<-begin
					headStart(i%2 == 0)
					_, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: rel.Generation, ExpectedGeneration: ptr.Generation,
						ExpectedEpoch: ptr.Epoch, IdempotencyKey: fmt.Sprintf("p%d", i)})
					if err != nil && !errors.Is(err, rollout.ErrNotReady) {
						t.Errorf("promote: %v", err)
					}
				}()
				go func() {
					defer wg.Done()
					<-begin
					headStart(i%2 == 1)
					if err := stop(t, e, rel); err != nil && !errors.Is(err, rollout.ErrNotReady) {
						t.Errorf("stop: %v", err)
					}
				}()
				close(begin)
				wg.Wait()
				promoted, stopped := e.outcome(t, rel.Generation)
				switch {
				case promoted:
					counts["promoted"]++
				case stopped:
					counts["stopped"]++
				default:
					t.Fatalf("run %d: generation %d neither promoted nor stopped", i, rel.Generation)
				}
				if kind == "deadline" {
					e.renewLeases(t) // the stop moved the clock two hours on
				}
			}
			t.Logf("%s: %v", kind, counts)
			if counts["promoted"] == 0 || counts["stopped"] == 0 {
				t.Fatalf("%s: one side won every run (%v): the race was never run both ways", kind, counts)
			}
		})
	}
}

// renewLeases heartbeats every instance of the env, as running instances
// do, so that they stay live members after the clock moved on.
func (e *env) renewLeases(t *testing.T) {
	t.Helper()
	for i := range 6 {
		if _, err := e.registry.Heartbeat(context.Background(), fmt.Sprintf("i%d", i), "boot-1"); err != nil {
			t.Fatal(err)
		}
	}
}
