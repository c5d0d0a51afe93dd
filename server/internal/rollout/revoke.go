package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// Revocation records that an operator revoked a generation: it can never
// be promoted.
type Revocation struct {
	ConfigID   string    `json:"config_id"`
	Generation int64     `json:"generation"`
	Reason     string    `json:"reason"`
	Actor      string    `json:"actor"`
	Time       time.Time `json:"time"`
	// Revision is the store revision of the record.
	Revision int64 `json:"-"`
}

// Revoke records that generation gen of config may never be promoted,
// with who revoked it and why. A candidate's rollout stops in the same
// write (its canaries go back to the active generation); a generation
// whose rollout is over is only marked. The active generation is refused:
// instances run it, and a revocation that left the pointer on it would
// promise what it cannot keep; roll back first, then revoke it.
func (r *Rollouts) Revoke(ctx context.Context, config string, gen int64, reason, actor string) (Revocation, error) {
	if reason == "" {
		return Revocation{}, fmt.Errorf("%w: a revocation needs a reason, for the audit trail", ErrInvalid)
	}
	for range maxAttempts {
		rv, err := r.revoke(ctx, config, gen, reason, actor)
		if errors.Is(err, store.ErrRevisionMismatch) {
			continue // promoted, stopped or revoked meanwhile: the next read says which
		}
		return rv, err
	}
	return Revocation{}, fmt.Errorf("%w: revoking %s generation %d", ErrContended, config, gen)
}

func (r *Rollouts) revoke(ctx context.Context, config string, gen int64, reason, actor string) (Revocation, error) {
	rv, err := r.viewOf(ctx, config, gen, true)
	if err != nil {
		return Revocation{}, err
	}
	s := rv.snapshot
	prev, err := r.revocationAt(ctx, config, gen, s.rev)
	switch {
	case err != nil:
		return Revocation{}, err
	case prev != nil:
		return Revocation{}, fmt.Errorf("%w: %s generation %d was revoked at %s by %s: %s",
			ErrAlreadyRevoked, config, gen, prev.Time.Format(time.RFC3339), prev.Actor, prev.Reason)
	case gen == s.ptr.Generation:
		return Revocation{}, fmt.Errorf("%w: %s generation %d is active (epoch %d); roll back first, then revoke it",
			ErrNotReady, config, gen, s.ptr.Epoch)
	}
	rec := Revocation{ConfigID: config, Generation: gen, Reason: reason, Actor: actor, Time: s.now.UTC()}
	b, err := records.Encode(rec)
	if err != nil {
		return Revocation{}, fmt.Errorf("rollout: encode revocation: %w", err)
	}
	key := records.Revoked(config, gen)
	txn := store.Txn{
		Compares: []store.Compare{
			{Key: records.Pointer(config), ModRevision: s.ptr.Revision},
			{Key: key, ModRevision: 0},
		},
		Unchanged: []store.Unchanged{{Prefix: records.Head(config), Since: s.rev}, {Prefix: records.Stop(config, gen), Since: s.rev}},
		Puts:      []store.Put{{Key: key, Value: b}},
	}
	if s.candidate() {
		st := newStop(s, rv.evals, "", "revoked: "+reason)
		st.Manual, st.Actor = true, actor
		sb, err := records.Encode(st)
		if err != nil {
			return Revocation{}, fmt.Errorf("rollout: encode stop record: %w", err)
		}
		txn.Puts = append(txn.Puts, store.Put{Key: records.Stop(config, gen), Value: sb})
	}
	res, err := r.store.Txn(ctx, txn)
	if err != nil {
		return Revocation{}, fmt.Errorf("rollout: store revocation of %s generation %d: %w", config, gen, err)
	}
	rec.Revision = res.Revision - int64(len(txn.Puts)) + 1
	return rec, nil
}

// GetRevocation returns the revocation of a generation, or nil.
func (r *Rollouts) GetRevocation(ctx context.Context, config string, gen int64) (*Revocation, error) {
	return r.revocationAt(ctx, config, gen, 0)
}

func (r *Rollouts) revocationAt(ctx context.Context, config string, gen, rev int64) (*Revocation, error) {
	var rec Revocation
	kv, ok, err := getAt(ctx, r.store, records.Revoked(config, gen), rev, &rec)
	if err != nil || !ok {
		return nil, err
	}
	rec.Revision = kv.ModRevision
	return &rec, nil
}
