package rollout

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
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
	// RequestID and Principal name the call, for the receipt: its audit
	// record's request ID and the authenticated principal.
	RequestID, Principal string
}

// Promote moves the pointer to m.To if it is still where the caller saw
// it, m.To is the config's newest release, was not revoked, was cut on the
// active generation (no rollback since it was created), its rollout did
// not stop, every stage passes, enough members reported what they run
// (its coverage), every dependency is active and its deadline has not
// passed. A repeat with the same idempotency key returns the receipt
// written; the key used for another request is refused, and a key a
// lookup fenced while this request was in flight fails it (*FencedError).
//
// Everything Promote decides on is read at one store revision, and the
// pointer and receipt are written in one transaction that commits only if
// none of it changed since (promoteConditions): when something changed,
// Promote decides again on a fresh read, so a concurrent stop, rejection,
// restart, revocation or rollback is never overruled, while reports that
// change nothing it decides on never make it try again.
func (r *Rollouts) Promote(ctx context.Context, m Move) (Receipt, error) {
	key, err := r.keyOf(ctx, m, false)
	if key.receipt != nil || err != nil {
		return derefReceipt(key.receipt), err
	}
	for range maxAttempts {
		rc, err := r.promote(ctx, m, key.rev)
		if errors.Is(err, store.ErrRevisionMismatch) {
			if done, derr := r.afterMismatch(ctx, m, false, key.rev); done != nil || derr != nil {
				return derefReceipt(done), derr // the same key won in a concurrent retry, or a lookup fenced it
			}
			continue
		}
		return rc, err
	}
	return Receipt{}, fmt.Errorf("%w: promoting %s generation %d", ErrContended, m.ConfigID, m.To)
}

// promote decides once, on the views as they are, and writes the receipt
// if the key is still at keyRev (absent, or the fence a lookup left).
func (r *Rollouts) promote(ctx context.Context, m Move, keyRev int64) (Receipt, error) {
	rv, err := r.promoteViewOf(ctx, m.ConfigID, m.To)
	if err != nil {
		return Receipt{}, err
	}
	if rv.ptr.Generation != m.ExpectedGeneration || rv.ptr.Epoch != m.ExpectedEpoch {
		return Receipt{}, m.moved(rv.ptr)
	}
	if err := r.checkPromotable(ctx, rv); err != nil {
		return Receipt{}, err
	}
	names := make([]string, len(rv.rel.Stages))
	for i, st := range rv.rel.Stages {
		names[i] = st.Name
	}
	compares, unchanged := promoteConditions(rv)
	return r.write(ctx, m, rv.ptr, keyRev, compares, unchanged,
		Receipt{ConfigID: m.ConfigID, From: rv.ptr.Generation, To: m.To, Epoch: rv.ptr.Epoch, Evidence: rv.evals, StageNames: names,
			MembershipGeneration: membershipGeneration(rv.retired), Retirements: retirementsInOrder(rv.retired)})
}

// checkPromotable says why the release rv shows may not be promoted over
// the pointer it read, or nil when it may.
func (r *Rollouts) checkPromotable(ctx context.Context, rv releaseView) error {
	gen, ptr, rev := rv.rel.Generation, rv.ptr, rv.rev
	if err := r.checkNotRevoked(ctx, rv.rel.ConfigID, gen, rev); err != nil {
		return err
	}
	switch {
	case gen <= ptr.Generation:
		return fmt.Errorf("%w: generation %d is not after the active generation %d; use rollback to go back", ErrNotReady, gen, ptr.Generation)
	case gen <= ptr.HighWater:
		return fmt.Errorf("%w: generation %d is not after generation %d, which was active once; create a new release to roll forward", ErrNotReady, gen, ptr.HighWater)
	case rv.stop != nil:
		return fmt.Errorf("%w: its rollout stopped at %s: %s; create a new release", ErrNotReady, rv.stop.Time.Format(time.RFC3339), rv.stop.Reason)
	case gen < rv.latest:
		return fmt.Errorf("%w: generation %d was superseded by generation %d; promote that one", ErrNotReady, gen, rv.latest)
	}
	if err := r.checkCutOnActive(ctx, rv.rel, rev); err != nil {
		return err
	}
	if err := r.checkDependenciesActive(ctx, rv.rel.Dependencies, rev); err != nil {
		return err
	}
	if deadline := rv.rel.CreatedAt.Add(rv.rel.Deadline); rv.now.After(deadline) {
		return fmt.Errorf("%w: its deadline passed at %s", ErrNotReady, deadline.Format(time.RFC3339))
	}
	for i, ev := range rv.evals {
		if ev.Outcome != quorum.Passed {
			return fmt.Errorf("%w: stage %q is %s: %s", ErrNotReady, rv.rel.Stages[i].Name, ev.Outcome, ev.Reason)
		}
	}
	if c := rv.coverage; !c.Met() {
		return fmt.Errorf("%w: %d of %d members reported what they run, and the release needs %d (min coverage %g); missing: %s; "+
			"a member reports once it applies any generation of %s from its current boot (retire members that are gone)",
			ErrNotReady, c.Reported, c.Members, c.Required, rv.rel.RequiredCoverage(), c.missingList(10), rv.rel.ConfigID)
	}
	return nil
}

// Rollback moves the pointer back to the generation that the active one
// replaced (the from-generation of the promotion that made it active), as
// a new receipt with the epoch incremented; no generation changes. The
// generation it leaves is never promoted again, and its ACKs no longer
// count. A revoked generation is never rolled back to.
func (r *Rollouts) Rollback(ctx context.Context, m Move) (Receipt, error) {
	key, err := r.keyOf(ctx, m, true)
	if key.receipt != nil || err != nil {
		return derefReceipt(key.receipt), err
	}
	ptr, err := r.Pointer(ctx, m.ConfigID)
	if err != nil {
		return Receipt{}, err
	}
	if ptr.Generation != m.ExpectedGeneration || ptr.Epoch != m.ExpectedEpoch {
		return Receipt{}, m.moved(ptr)
	}
	if ptr.Generation == 0 {
		return Receipt{}, fmt.Errorf("%w: config %s has never been promoted", ErrCannotRollBack, m.ConfigID)
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
		return Receipt{}, fmt.Errorf("%w: generation %d replaced no earlier active generation; there is nothing to roll back to", ErrCannotRollBack, ptr.Generation)
	}
	if err := r.checkRollbackTarget(ctx, m.ConfigID, target, ptr.Generation); err != nil {
		return Receipt{}, err
	}
	// The revocation is compared too: one written after the read wins.
	notRevoked := []store.Compare{{Key: records.Revoked(m.ConfigID, target), ModRevision: 0}}
	rc, err := r.write(ctx, m, ptr, key.rev, notRevoked, nil, Receipt{ConfigID: m.ConfigID, From: ptr.Generation, To: target, Epoch: ptr.Epoch + 1, Rollback: true})
	if errors.Is(err, store.ErrRevisionMismatch) {
		if done, derr := r.afterMismatch(ctx, m, true, key.rev); done != nil || derr != nil {
			return derefReceipt(done), derr
		}
		now, perr := r.Pointer(ctx, m.ConfigID)
		if perr != nil {
			return Receipt{}, perr
		}
		return Receipt{}, m.moved(now)
	}
	return rc, err
}

// GetPromotion returns the receipt written for an idempotency key. When
// there is none, it fences the key for good before it answers
// ErrNoPromotion: it writes a fence record under the key, conditioned on
// the key being as it read it; a move commits only if it finds the key as
// it found it at its start, and a move that finds a fence fails. So "not
// found" stays true: a move with the key still in flight, or one that
// reaches the server only after the lookup, fails with a *FencedError,
// and the move is sent again with a new key. A config without releases
// has no moves to fence, and nothing is written for it.
func (r *Rollouts) GetPromotion(ctx context.Context, config, key string) (Receipt, error) {
	if err := checkKey(key); err != nil {
		return Receipt{}, err
	}
	for range maxAttempts {
		ks, err := r.readKey(ctx, config, key)
		if ks.receipt != nil || err != nil {
			return derefReceipt(ks.receipt), err
		}
		err = r.fence(ctx, config, key, ks.rev)
		if errors.Is(err, store.ErrRevisionMismatch) {
			continue // a receipt or another lookup's fence came first: read it again
		}
		if err != nil {
			return Receipt{}, err
		}
		return Receipt{}, fmt.Errorf("%w: %s of config %s (the key is fenced for good: no move with it can commit now; "+
			"send the move again with a new key)", ErrNoPromotion, key, config)
	}
	return Receipt{}, fmt.Errorf("%w: looking up key %s of config %s", ErrContended, key, config)
}

// Fence is what a lookup that found no receipt leaves under the key: a
// move that read the key before it can no longer commit.
type Fence struct {
	ConfigID       string    `json:"config_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	FencedAt       time.Time `json:"fenced_at"`
}

// storedReceipt is what the key of a receipt holds: a receipt, or a fence
// (FencedAt set).
type storedReceipt struct {
	Receipt
	FencedAt *time.Time `json:"fenced_at,omitempty"`
}

// keyState is what an idempotency key holds now: the receipt written under
// it, or (receipt nil) the revision a move with it must find the key at to
// commit: 0 while nothing was written there, or the revision of the fence
// the last lookup left.
type keyState struct {
	receipt *Receipt
	rev     int64
}

// readKey reads what the key of a move holds.
func (r *Rollouts) readKey(ctx context.Context, config, key string) (keyState, error) {
	var sr storedReceipt
	kv, ok, err := getAt(ctx, r.store, records.Receipt(config, key), 0, &sr)
	switch {
	case err != nil:
		return keyState{}, fmt.Errorf("rollout: read receipt %s of config %s: %w", key, config, err)
	case !ok:
		return keyState{}, nil
	case sr.FencedAt != nil:
		return keyState{rev: kv.ModRevision}, nil
	}
	rc := sr.Receipt
	rc.Revision = kv.ModRevision
	return keyState{receipt: &rc, rev: kv.ModRevision}, nil
}

// fence writes a fence under the key if it is still at rev. A config that
// has no release needs none: no move of it can commit.
func (r *Rollouts) fence(ctx context.Context, config, key string, rev int64) error {
	head, err := r.releases.HeadAt(ctx, config, 0)
	if err != nil || head == 0 {
		return err
	}
	b, err := records.Encode(Fence{ConfigID: config, IdempotencyKey: key, FencedAt: r.now().UTC()})
	if err != nil {
		return err
	}
	k := records.Receipt(config, key)
	_, err = r.store.Txn(ctx, store.Txn{Compares: []store.Compare{{Key: k, ModRevision: rev}}, Puts: []store.Put{{Key: k, Value: b}}})
	if err != nil && !errors.Is(err, store.ErrRevisionMismatch) {
		return fmt.Errorf("rollout: fence key %s of config %s: %w", key, config, err)
	}
	return err
}

// Receipts returns a config's receipts in the order they were written.
func (r *Rollouts) Receipts(ctx context.Context, config string) ([]Receipt, error) {
	return r.receiptsAt(ctx, config, 0)
}

// receiptsAt returns a config's receipts at rev (0: now) in the order they
// were written.
func (r *Rollouts) receiptsAt(ctx context.Context, config string, rev int64) ([]Receipt, error) {
	var out []Receipt
	_, err := store.EachAt(ctx, r.store, records.Receipts(config), rev, func(kv store.KeyValue) error {
		var sr storedReceipt
		if err := records.Decode(kv, &sr); err != nil {
			return err
		}
		if sr.FencedAt != nil {
			return nil // a lookup's fence: no move
		}
		rc := sr.Receipt
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

// keyOf reads the key of m: the receipt already written under it when it
// records the same request (a retry: the same kind of move, to the same
// generation for a promotion; the expectation may differ, since a retry
// after the move happened reads the pointer it moved), or the revision a
// move must find the key at; a receipt of another request under the key is
// ErrKeyReused.
func (r *Rollouts) keyOf(ctx context.Context, m Move, rollback bool) (keyState, error) {
	if err := checkKey(m.IdempotencyKey); err != nil {
		return keyState{}, err
	}
	ks, err := r.readKey(ctx, m.ConfigID, m.IdempotencyKey)
	switch {
	case err != nil:
		return keyState{}, err
	case ks.receipt == nil && ks.rev != 0:
		// A lookup fenced the key: it answered that no move with it
		// happened, and none ever may, whether it was sent before the
		// lookup or reaches the server after it.
		return keyState{}, &FencedError{ConfigID: m.ConfigID, IdempotencyKey: m.IdempotencyKey}
	case ks.receipt == nil:
		return ks, nil
	}
	if rc := *ks.receipt; rc.Rollback != rollback || (!rollback && rc.To != m.To) {
		return keyState{}, fmt.Errorf("%w: key %s of config %s is the receipt of %s; use a new key for a new request",
			ErrKeyReused, m.IdempotencyKey, m.ConfigID, describe(rc))
	}
	return ks, nil
}

// afterMismatch reads the key of m again after its write found a condition
// changed: the receipt of the same request (a concurrent retry won), a
// *FencedError when a lookup fenced the key after the request read it at
// rev, or neither (decide again).
func (r *Rollouts) afterMismatch(ctx context.Context, m Move, rollback bool, rev int64) (*Receipt, error) {
	ks, err := r.keyOf(ctx, m, rollback)
	switch {
	case ks.receipt != nil || err != nil:
		return ks.receipt, err
	case ks.rev != rev:
		return nil, &FencedError{ConfigID: m.ConfigID, IdempotencyKey: m.IdempotencyKey}
	}
	return nil, nil
}

func checkKey(key string) error {
	if !keyPattern.MatchString(key) {
		return fmt.Errorf("%w: idempotency key %q must be 1-128 of A-Z a-z 0-9 . _ : -", ErrInvalid, key)
	}
	return nil
}

func describe(rc Receipt) string {
	kind := "a promotion"
	if rc.Rollback {
		kind = "a rollback"
	}
	return fmt.Sprintf("%s from generation %d to %d at epoch %d (by %s at %s)", kind, rc.From, rc.To, rc.Epoch, rc.Actor, rc.Time.Format(time.RFC3339))
}

func derefReceipt(rc *Receipt) Receipt {
	if rc == nil {
		return Receipt{}
	}
	return *rc
}

// write commits the receipt and the new pointer in one transaction that
// compares the pointer read and the key (at keyRev: absent, or the fence
// of the last lookup), and holds the other compares and the
// unchanged conditions the decision rests on. A failed condition is
// returned as the store's ErrRevisionMismatch; any other failure may have
// committed, and is an *UnknownError.
func (r *Rollouts) write(ctx context.Context, m Move, ptr Pointer, keyRev int64, compares []store.Compare, unchanged []store.Unchanged, rc Receipt) (Receipt, error) {
	rc.Actor, rc.Time, rc.IdempotencyKey = m.Actor, r.now().UTC(), m.IdempotencyKey
	rc.RequestID, rc.Principal = m.RequestID, m.Principal
	receiptKey := records.Receipt(m.ConfigID, m.IdempotencyKey)
	rb, err := records.Encode(rc)
	if err != nil {
		return Receipt{}, err
	}
	pb, err := records.Encode(Pointer{Generation: rc.To, Epoch: rc.Epoch, ReceiptKey: receiptKey, HighWater: max(ptr.HighWater, ptr.Generation, rc.To)})
	if err != nil {
		return Receipt{}, err
	}
	res, err := r.store.Txn(ctx, store.Txn{
		Compares:  append([]store.Compare{{Key: records.Pointer(m.ConfigID), ModRevision: ptr.Revision}, {Key: receiptKey, ModRevision: keyRev}}, compares...),
		Unchanged: unchanged,
		Puts:      []store.Put{{Key: receiptKey, Value: rb}, {Key: records.Pointer(m.ConfigID), Value: pb}},
	})
	if errors.Is(err, store.ErrRevisionMismatch) {
		return Receipt{}, err
	}
	if err != nil {
		// Only a condition that failed is a definite no: any other failure
		// (a store that timed out or went away mid-write) may have
		// committed, and only the receipt can tell.
		return Receipt{}, &UnknownError{ConfigID: m.ConfigID, IdempotencyKey: m.IdempotencyKey, Err: err}
	}
	rc.Revision = res.Revision - 1
	return rc, nil
}

// checkDependenciesActive refuses a promotion before every config the
// release depends on runs at least the generation it needs, as of rev.
func (r *Rollouts) checkDependenciesActive(ctx context.Context, deps map[string]int64, rev int64) error {
	configs := make([]string, 0, len(deps))
	for c := range deps {
		configs = append(configs, c)
	}
	sort.Strings(configs)
	for _, c := range configs {
		ptr, err := r.pointerAt(ctx, c, rev)
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

// checkNotRevoked refuses a generation an operator revoked, as of rev.
func (r *Rollouts) checkNotRevoked(ctx context.Context, config string, gen, rev int64) error {
	rv, err := r.revocationAt(ctx, config, gen, rev)
	if err != nil || rv == nil {
		return err
	}
	return fmt.Errorf("%w: generation %d was revoked at %s by %s: %s; it can never be promoted: create a new release",
		ErrNotReady, gen, rv.Time.Format(time.RFC3339), rv.Actor, rv.Reason)
}

// checkCutOnActive refuses a release cut while another generation was
// active than the one active now, as of rev. Its rollout tested the move
// from the generation active when it was cut; the pointer moves only by
// promoting the newest release or by rolling back, so that generation is
// still active unless a rollback came after the release was created.
func (r *Rollouts) checkCutOnActive(ctx context.Context, rel release.Release, rev int64) error {
	receipts, err := r.receiptsAt(ctx, rel.ConfigID, rev)
	if err != nil {
		return err
	}
	for _, rc := range receipts {
		if rc.Rollback && rc.Revision > rel.Revision {
			return fmt.Errorf("%w: generation %d was cut while generation %d was active, and a rollback (epoch %d, by %s at %s) made generation %d active since: "+
				"its rollout tested the move from generation %d, not from %d; create a new release on the active generation",
				ErrNotReady, rel.Generation, rc.From, rc.Epoch, rc.Actor, rc.Time.Format(time.RFC3339), rc.To, rc.From, rc.To)
		}
	}
	return nil
}

// promoteConditions are what a promotion decided on rv rests on, besides
// the pointer and the key: the head, the stop record, the revocation and
// retirements of the release, the frozen members' registrations and
// counted evidence, and the dependencies' pointers. Nothing else: an
// ACK that does not count or changes no member's counted state, or a
// registration of an instance outside the membership, leaves them all
// unchanged, so a fleet's reports cannot starve a promotion.
func promoteConditions(rv releaseView) ([]store.Compare, []store.Unchanged) {
	config, gen, rev := rv.rel.ConfigID, rv.rel.Generation, rv.rev
	compares := []store.Compare{
		{Key: records.Stop(config, gen), ModRevision: 0},
		{Key: records.Revoked(config, gen), ModRevision: 0},
	}
	ids := make([]string, 0, len(rv.epochs))
	for id := range rv.epochs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		compares = append(compares, store.Compare{Key: instance.RegistrationKey(id), ModRevision: rv.epochs[id]})
	}
	unchanged := []store.Unchanged{
		{Prefix: records.Head(config), Since: rev},
		{Prefix: records.RetiredOf(config, gen), Since: rev},
		{Prefix: records.EvidenceOf(config, gen), Since: rev},
	}
	deps := make([]string, 0, len(rv.rel.Dependencies))
	for dep := range rv.rel.Dependencies {
		deps = append(deps, dep)
	}
	sort.Strings(deps)
	for _, dep := range deps {
		unchanged = append(unchanged, store.Unchanged{Prefix: records.Pointer(dep), Since: rev})
	}
	return compares, unchanged
}

// checkRollbackTarget refuses to roll back from generation from to a
// revoked generation target.
func (r *Rollouts) checkRollbackTarget(ctx context.Context, config string, target, from int64) error {
	rv, err := r.GetRevocation(ctx, config, target)
	if err != nil || rv == nil {
		return err
	}
	return fmt.Errorf("%w: generation %d, which generation %d replaced, was revoked at %s by %s: %s; there is nothing to roll back to: promote a new release",
		ErrCannotRollBack, target, from, rv.Time.Format(time.RFC3339), rv.Actor, rv.Reason)
}

// moved is the error of m when the pointer is at ptr, not where m
// expected it.
func (m Move) moved(ptr Pointer) *PointerError {
	return &PointerError{ConfigID: m.ConfigID, ExpectedGeneration: m.ExpectedGeneration, ExpectedEpoch: m.ExpectedEpoch, Pointer: ptr}
}
