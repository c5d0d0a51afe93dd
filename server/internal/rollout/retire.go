package rollout

import (
	"context"
	"errors"
	"fmt"

	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// Retire removes a member from a release's frozen membership, recording who
// did it, when and why. It is the only way the denominator of a frozen
// membership shrinks: an instance that was decommissioned, or will never
// come back, stops blocking the stages that count it. The member's ACKs no
// longer count; a fraction stage's cohort takes the next member in rank in
// its place. Only a candidate or the active release can be retired from:
// the evidence of a stopped, superseded or rolled-back one is frozen.
// Retiring settles the rollout, which may pass a stage.
func (r *Rollouts) Retire(ctx context.Context, config string, gen int64, identity, reason, actor string) (Retirement, error) {
	if reason == "" {
		return Retirement{}, fmt.Errorf("%w: a retirement needs a reason, for the audit trail", ErrInvalid)
	}
	for range maxAttempts {
		rt, err := r.retire(ctx, config, gen, identity, reason, actor)
		if errors.Is(err, store.ErrRevisionMismatch) {
			continue
		}
		if err != nil {
			return Retirement{}, err
		}
		if err := r.Settle(ctx, config, gen); err != nil {
			return Retirement{}, fmt.Errorf("rollout: settle after the retirement: %w", err)
		}
		return rt, nil
	}
	return Retirement{}, fmt.Errorf("%w: retiring %s from %s generation %d", ErrContended, identity, config, gen)
}

func (r *Rollouts) retire(ctx context.Context, config string, gen int64, identity, reason, actor string) (Retirement, error) {
	rv, err := r.viewOf(ctx, config, gen, true)
	if err != nil {
		return Retirement{}, err
	}
	s := rv.snapshot
	_, member := s.rel.MemberIndex(identity)
	if prev, ok := s.retired[identity]; ok {
		return Retirement{}, fmt.Errorf("%w: %s was retired from %s generation %d by %s: %s", ErrAlreadyRetired, identity, config, gen, prev.Actor, prev.Reason)
	}
	if !member {
		return Retirement{}, fmt.Errorf("%w: %s is not in the frozen membership of %s generation %d", ErrNotMember, identity, config, gen)
	}
	if over := s.over(); over != "" {
		return Retirement{}, fmt.Errorf("%w: %s", ErrNotReady, over)
	}
	rt := Retirement{ConfigID: config, Generation: gen, WorkloadIdentity: identity, Reason: reason, Actor: actor, Time: s.now.UTC(),
		MembershipGeneration: membershipGeneration(s.retired) + 1}
	b, err := records.Encode(rt)
	if err != nil {
		return Retirement{}, fmt.Errorf("rollout: encode retirement: %w", err)
	}
	key := records.Retired(config, gen, identity)
	res, err := r.store.Txn(ctx, store.Txn{
		Compares: []store.Compare{
			{Key: records.Pointer(config), ModRevision: s.ptr.Revision},
			{Key: records.Stop(config, gen), ModRevision: 0},
			{Key: key, ModRevision: 0},
		},
		// Another retirement since rev would make the same membership
		// generation: decide again.
		Unchanged: []store.Unchanged{{Prefix: records.Head(config), Since: s.rev}, {Prefix: records.RetiredOf(config, gen), Since: s.rev}},
		Puts:      []store.Put{{Key: key, Value: b}},
	})
	if err != nil {
		return Retirement{}, fmt.Errorf("rollout: store retirement: %w", err)
	}
	rt.Revision = res.Revision
	return rt, nil
}
