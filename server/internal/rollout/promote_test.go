package rollout_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/rollout"
)

// TestALookupFencesAMoveInFlight looks the key of a Promote and of a
// Rollback up between the move's read and its write, as the CLI does after
// a lost answer: the lookup answers "not found", so the move in flight
// must fail and leave no receipt; the same key sent again then commits.
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
			if !errors.Is(err, rollout.ErrNoPromotion) {
				t.Fatalf("the %s in flight after a lookup answered not found = %+v, %v; want ErrFenced", kind, rc, err)
			}
			if got, err := e.rollouts.GetPromotion(ctx, "routing", "k"); !errors.Is(err, rollout.ErrNoPromotion) {
				t.Fatalf("after the fenced %s, GetPromotion = %+v, %v; want not found", kind, got, err)
			}
			before := map[string]int64{"promote": 0, "rollback": 2}[kind]
			if ptr, err := e.rollouts.Pointer(ctx, "routing"); err != nil || ptr.Generation != before {
				t.Fatalf("pointer after the fenced %s = %+v, %v; want generation %d", kind, ptr, err, before)
			}
			// The fenced attempt can no longer commit, so the same key may
			// be sent again, and this time it is the move.
			rc, err = do(e.rollouts)
			if err != nil {
				t.Fatalf("the same key sent again = %v", err)
			}
			if got, err := e.rollouts.GetPromotion(ctx, "routing", "k"); err != nil || got.To != rc.To || got.Revision != rc.Revision {
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
