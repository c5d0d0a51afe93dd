package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/store"
)

var keyPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// Move asks for one move of the pointer.
type Move struct {
	ConfigID string
	// To is the generation to promote (ignored for a rollback).
	To int64
	// ExpectedGeneration and ExpectedEpoch are the pointer the caller saw.
	ExpectedGeneration, ExpectedEpoch int64
	IdempotencyKey                    string
	Actor                             string
}

// Promote moves the pointer to m.To if it is still where the caller saw
// it, the rollout did not stop, every stage of the release passed, and its
// deadline has not passed. A repeat with the same idempotency key returns
// the receipt written.
func (r *Rollouts) Promote(ctx context.Context, m Move) (Receipt, error) {
	if done, err := r.existing(ctx, m); done != nil || err != nil {
		return derefReceipt(done), err
	}
	ptr, err := r.checkPointer(ctx, m)
	if err != nil {
		return Receipt{}, err
	}
	if m.To <= ptr.Generation {
		return Receipt{}, fmt.Errorf("%w: generation %d is not after the active generation %d; use rollback to go back", ErrNotReady, m.To, ptr.Generation)
	}
	if m.To <= ptr.HighWater {
		return Receipt{}, fmt.Errorf("%w: generation %d is not after generation %d, which was active once; create a new release to roll forward", ErrNotReady, m.To, ptr.HighWater)
	}
	st, err := r.Status(ctx, m.ConfigID, m.To)
	if err != nil {
		return Receipt{}, err
	}
	if st.Stop != nil {
		return Receipt{}, fmt.Errorf("%w: its rollout stopped at %s: %s; create a new release", ErrNotReady, st.Stop.Time.Format(time.RFC3339), st.Stop.Reason)
	}
	if err := r.checkDependenciesActive(ctx, st.Release.Dependencies); err != nil {
		return Receipt{}, err
	}
	if deadline := st.Release.CreatedAt.Add(st.Release.Deadline); r.now().After(deadline) {
		return Receipt{}, fmt.Errorf("%w: its deadline passed at %s", ErrNotReady, deadline.Format(time.RFC3339))
	}
	var evidence []quorum.Evaluation
	var names []string
	for _, s := range st.Stages {
		if s.Evaluation.Outcome != quorum.Passed {
			return Receipt{}, fmt.Errorf("%w: stage %q is %s: %s", ErrNotReady, s.Name, s.Evaluation.Outcome, s.Evaluation.Reason)
		}
		evidence = append(evidence, s.Evaluation)
		names = append(names, s.Name)
	}
	return r.write(ctx, m, ptr, Receipt{ConfigID: m.ConfigID, From: ptr.Generation, To: m.To, Epoch: ptr.Epoch, Evidence: evidence, StageNames: names})
}

// Rollback moves the pointer back to the generation that the active one
// replaced (the from-generation of the promotion that made it active), as
// a new receipt with the epoch incremented; no generation changes.
func (r *Rollouts) Rollback(ctx context.Context, m Move) (Receipt, error) {
	if done, err := r.existing(ctx, m); done != nil || err != nil {
		return derefReceipt(done), err
	}
	ptr, err := r.checkPointer(ctx, m)
	if err != nil {
		return Receipt{}, err
	}
	if ptr.Generation == 0 {
		return Receipt{}, fmt.Errorf("%w: config %s has never been promoted", ErrNotReady, m.ConfigID)
	}
	receipts, err := r.Receipts(ctx, m.ConfigID)
	if err != nil {
		return Receipt{}, err
	}
	target := int64(0)
	for _, rc := range receipts {
		if !rc.Rollback && rc.To == ptr.Generation {
			target = rc.From
		}
	}
	if target == 0 {
		return Receipt{}, fmt.Errorf("%w: generation %d replaced no earlier active generation; there is nothing to roll back to", ErrNotReady, ptr.Generation)
	}
	return r.write(ctx, m, ptr, Receipt{ConfigID: m.ConfigID, From: ptr.Generation, To: target, Epoch: ptr.Epoch + 1, Rollback: true})
}

// GetPromotion returns the receipt written for an idempotency key.
func (r *Rollouts) GetPromotion(ctx context.Context, config, key string) (Receipt, error) {
	kv, _, err := r.store.Get(ctx, configKey(config, "receipts/"+key), 0)
	if errors.Is(err, store.ErrNotFound) {
		return Receipt{}, fmt.Errorf("%w: %s of config %s", ErrNoPromotion, key, config)
	}
	if err != nil {
		return Receipt{}, err
	}
	var rc Receipt
	if err := json.Unmarshal(kv.Value, &rc); err != nil {
		return Receipt{}, fmt.Errorf("rollout: receipt %s: %w", key, err)
	}
	rc.Revision = kv.ModRevision
	return rc, nil
}

// Receipts returns a config's receipts in the order they were written.
func (r *Rollouts) Receipts(ctx context.Context, config string) ([]Receipt, error) {
	var out []Receipt
	err := store.Each(ctx, r.store, configKey(config, "receipts/"), func(kv store.KeyValue) error {
		var rc Receipt
		if err := json.Unmarshal(kv.Value, &rc); err != nil {
			return fmt.Errorf("rollout: receipt %s: %w", kv.Key, err)
		}
		rc.Revision = kv.ModRevision
		out = append(out, rc)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out, nil
}

// existing returns the receipt already written for the key, if any.
func (r *Rollouts) existing(ctx context.Context, m Move) (*Receipt, error) {
	if !keyPattern.MatchString(m.IdempotencyKey) {
		return nil, fmt.Errorf("%w: idempotency key %q must be 1-128 of A-Z a-z 0-9 . _ : -", ErrInvalid, m.IdempotencyKey)
	}
	rc, err := r.GetPromotion(ctx, m.ConfigID, m.IdempotencyKey)
	if errors.Is(err, ErrNoPromotion) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &rc, nil
}

func derefReceipt(rc *Receipt) Receipt {
	if rc == nil {
		return Receipt{}
	}
	return *rc
}

func (r *Rollouts) checkPointer(ctx context.Context, m Move) (Pointer, error) {
	ptr, err := r.Pointer(ctx, m.ConfigID)
	if err != nil {
		return Pointer{}, err
	}
	if ptr.Generation != m.ExpectedGeneration || ptr.Epoch != m.ExpectedEpoch {
		return Pointer{}, &PointerError{Pointer: ptr}
	}
	return ptr, nil
}

// write commits the receipt and the new pointer in one transaction.
func (r *Rollouts) write(ctx context.Context, m Move, ptr Pointer, rc Receipt) (Receipt, error) {
	rc.Actor, rc.Time, rc.IdempotencyKey = m.Actor, r.now().UTC(), m.IdempotencyKey
	receiptKey := configKey(m.ConfigID, "receipts/"+m.IdempotencyKey)
	rb, err := json.Marshal(rc)
	if err != nil {
		return Receipt{}, err
	}
	pb, err := json.Marshal(Pointer{Generation: rc.To, Epoch: rc.Epoch, ReceiptKey: receiptKey, HighWater: max(ptr.HighWater, ptr.Generation, rc.To)})
	if err != nil {
		return Receipt{}, err
	}
	res, err := r.store.Txn(ctx, store.Txn{
		Compares: []store.Compare{{Key: configKey(m.ConfigID, "active"), ModRevision: ptr.Revision}, {Key: receiptKey, ModRevision: 0}},
		Puts:     []store.Put{{Key: receiptKey, Value: rb}, {Key: configKey(m.ConfigID, "active"), Value: pb}},
	})
	if errors.Is(err, store.ErrRevisionMismatch) {
		if done, derr := r.existing(ctx, m); done != nil || derr != nil {
			return derefReceipt(done), derr // the same key won, in a concurrent retry
		}
		now, perr := r.Pointer(ctx, m.ConfigID)
		if perr != nil {
			return Receipt{}, perr
		}
		return Receipt{}, &PointerError{Pointer: now}
	}
	if err != nil {
		// Only a compare that failed is a definite no: any other failure
		// (a store that timed out or went away mid-write) may have
		// committed, and only the receipt can tell.
		return Receipt{}, &UnknownError{ConfigID: m.ConfigID, IdempotencyKey: m.IdempotencyKey, Err: err}
	}
	rc.Revision = res.Revision - 1
	return rc, nil
}

// checkDependenciesActive refuses a promotion before every config the
// release depends on runs at least the generation it needs.
func (r *Rollouts) checkDependenciesActive(ctx context.Context, deps map[string]int64) error {
	configs := make([]string, 0, len(deps))
	for c := range deps {
		configs = append(configs, c)
	}
	sort.Strings(configs)
	for _, c := range configs {
		ptr, err := r.Pointer(ctx, c)
		if err != nil {
			return err
		}
		if ptr.Generation < deps[c] {
			return fmt.Errorf("%w: it depends on %s generation %d, and %s is active at generation %d; promote that first",
				ErrNotReady, c, deps[c], c, ptr.Generation)
		}
	}
	return nil
}
