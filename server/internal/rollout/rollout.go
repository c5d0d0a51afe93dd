// Package rollout records ACKs, evaluates stages against a release's frozen
// membership, moves each rollout forward, and moves a config's active
// pointer by compare-and-swap with a promotion receipt.
//
// Its records (pointers, receipts, progress and stop records, retirements,
// ACKs and applied records) live where package records lays them out.
//
// # Reads and writes
//
// Status, Assignments and ReleaseStates only read. Everything that decides
// reads the records it decides on at one store revision and writes with a
// transaction conditioned on them not having changed since (store.Txn
// compares and Unchanged prefixes). Of two writers that decided on
// overlapping records, one commits and the other re-reads and decides
// again, so no decision rests on a state that never existed: a Promote and
// a stop of the same release cannot both win, and an ACK is judged against
// the pointer, stop record and registration it is stored with.
//
// # ACKs in batches
//
// ACKs are recorded in batches (SubmitAck; RecordAck waits for one): what
// queued while the previous batch committed is judged at one revision
// and stored with one transaction whose conditions are the union of the
// judgements', at most one ACK per instance and config per batch, so that
// an instance's reports are judged in order, each against those before
// it. Each is answered once its batch committed. A report sent again with
// its report ID is answered with the ACK stored the first time.
//
// # What counts
//
// An ACK counts toward quorum only when it comes from a frozen, unretired
// member, from its current registration (boot and membership epoch), with
// the release's content and validator digests, while the release is active
// or, as a candidate, assigned to the instance by a stage the rollout has
// reached, in apply-sequence order, and (for HEALTHY_ACKED) after the
// release's health window and within its stage's health budget. Every ACK is
// stored either way, with the reason it did not count. A member's state is
// its latest counted ACK from its current registration: a restart resets
// it. A counted ACK counts toward the stage that assigned the release to
// the instance, and only there: its shadow stage while it only validates
// (the ACK is stored with Shadow set), the stage that applies once that is
// reached (see release.Layout for which stages take which members).
//
// # Moving forward
//
// A release's rollout moves only forward. Settle evaluates it and records
// each stage that passed (reaching the next stage, whose instances are then
// assigned the release) or the stop of a rollout whose reached stage
// failed; a stage not yet reached assigned the release to nobody and never
// stops it.
// Promote needs every stage passing at the revision it commits against. A
// rollback is a new receipt with the epoch incremented; the release it left
// is never promoted again and its evidence is frozen.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

var (
	// ErrInvalid means a malformed request.
	ErrInvalid = errors.New("rollout: invalid request")
	// ErrPointerMoved means the active pointer is not what the caller
	// expected (or another promotion won the race); *PointerError says
	// where it is.
	ErrPointerMoved = errors.New("rollout: the active pointer moved")
	// ErrNotReady means the release does not meet the conditions of
	// promotion (its stages, digests or deadline), or its rollout is over.
	ErrNotReady = errors.New("rollout: release not ready for promotion")
	// ErrCannotRollBack means a rollback has no generation to go back to
	// (the config was never promoted, the active generation replaced none,
	// or the one it replaced was revoked).
	ErrCannotRollBack = errors.New("rollout: cannot roll back")
	// ErrNoPromotion means no receipt has that idempotency key.
	ErrNoPromotion = errors.New("rollout: no promotion with that idempotency key")
	// ErrKeyReused means an idempotency key already names a receipt of a
	// different request.
	ErrKeyReused = errors.New("rollout: idempotency key already used for another request")
	// ErrPromotionUnknown means the store write of a Promote or Rollback
	// ended without a definite answer: it may or may not have committed.
	// *UnknownError names the key to resolve it with (GetPromotion).
	ErrPromotionUnknown = errors.New("rollout: PROMOTION_UNKNOWN")
	// ErrFenced means a lookup of a move's idempotency key answered "not
	// found", so no move with the key commits, in flight then or sent
	// after; *FencedError names the key.
	ErrFenced = errors.New("rollout: the idempotency key was fenced by a lookup")
	// ErrAlreadyRevoked means the generation was revoked before.
	ErrAlreadyRevoked = errors.New("rollout: generation already revoked")
	// ErrNotMember means the instance is not in the release's frozen
	// membership.
	ErrNotMember = errors.New("rollout: not a member of the release")
	// ErrAlreadyRetired means the member was retired before.
	ErrAlreadyRetired = errors.New("rollout: member already retired")
	// ErrContended means the records a decision rests on kept changing
	// while it was being made; the caller may retry.
	ErrContended = errors.New("rollout: the rollout kept changing during the request")
)

// UnknownError reports a move whose outcome is unknown. It matches
// ErrPromotionUnknown.
type UnknownError struct {
	ConfigID, IdempotencyKey string
	// Err is what the store said.
	Err error
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("rollout: PROMOTION_UNKNOWN: the write of receipt %s of config %s ended without an answer (%v); "+
		"read it with GetPromotion: a receipt means it happened, NOT_FOUND that it did not", e.IdempotencyKey, e.ConfigID, e.Err)
}

// Is reports whether target is ErrPromotionUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrPromotionUnknown }

// Unwrap returns the store's error.
func (e *UnknownError) Unwrap() error { return e.Err }

// FencedError reports a move whose idempotency key a lookup (GetPromotion)
// fenced, while the move was in flight or before it arrived: the lookup
// answered that no receipt exists, so the move never commits. It matches
// ErrFenced.
type FencedError struct {
	ConfigID, IdempotencyKey string
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("rollout: key %s of config %s was looked up and found no receipt, which fences it for good: "+
		"no move with it happened or ever will; send the move again with a new key", e.IdempotencyKey, e.ConfigID)
}

// Is reports whether target is ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// PointerError reports the pointer as it is. It matches ErrPointerMoved.
type PointerError struct {
	// ConfigID is the config moved.
	ConfigID string
	// ExpectedGeneration and ExpectedEpoch are where the move expected
	// the pointer.
	ExpectedGeneration, ExpectedEpoch int64
	// Pointer is the active pointer now.
	Pointer Pointer
}

func (e *PointerError) Error() string {
	return fmt.Sprintf("rollout: the active pointer is at generation %d epoch %d", e.Pointer.Generation, e.Pointer.Epoch)
}

// Is reports whether target is ErrPointerMoved.
func (e *PointerError) Is(target error) bool { return target == ErrPointerMoved }

// Pointer is a config's active pointer.
type Pointer struct {
	Generation int64  `json:"generation"`
	Epoch      int64  `json:"epoch"`
	ReceiptKey string `json:"receipt_key"`
	// HighWater is the highest generation ever promoted. A release at or
	// below it was active once (and may have been rolled back) or was
	// passed over: its rollout is over.
	HighWater int64 `json:"high_water"`
	// Revision is the store revision of the pointer (0: never set).
	Revision int64 `json:"-"`
}

// promoted reports whether gen was ever active or passed over by a
// promotion: its rollout is over either way.
func (p Pointer) promoted(gen int64) bool { return gen <= max(p.Generation, p.HighWater) }

// Receipt is the proof of one move of the pointer.
type Receipt struct {
	ConfigID       string              `json:"config_id"`
	From           int64               `json:"from_generation"`
	To             int64               `json:"to_generation"`
	Epoch          int64               `json:"epoch"`
	Rollback       bool                `json:"rollback"`
	Evidence       []quorum.Evaluation `json:"evidence,omitempty"`
	StageNames     []string            `json:"stage_names,omitempty"`
	Actor          string              `json:"actor"`
	Time           time.Time           `json:"time"`
	IdempotencyKey string              `json:"idempotency_key"`
	// MembershipGeneration is the generation of the membership the
	// evidence was counted against, and Retirements the retirements that
	// made it, in order: what the promotion relied on.
	MembershipGeneration int64        `json:"membership_generation,omitempty"`
	Retirements          []Retirement `json:"retirements,omitempty"`
	// RequestID is the ID of the call that moved the pointer, which its
	// audit record carries; Principal is who the server authenticated for
	// it.
	RequestID string `json:"request_id,omitempty"`
	Principal string `json:"principal,omitempty"`
	// Revision is the store revision of the receipt.
	Revision int64 `json:"-"`
}

// Rollouts records ACKs and moves rollouts and pointers. Its decisions and
// reads rest on views of every config's rollout that Run keeps current; a
// Rollouts answers only while its Run runs.
type Rollouts struct {
	store    store.Store
	releases *release.Releases
	registry *instance.Registry
	now      func() time.Time
	log      *slog.Logger
	views    *views
	acks     *ackBatcher
	// written holds the records a batch of ACKs is committing, for the
	// views to take without decoding them.
	written writtenRecords
}

// New returns Rollouts over st. The caller runs Run.
func New(st store.Store, releases *release.Releases, registry *instance.Registry, opts ...Option) *Rollouts {
	r := &Rollouts{store: st, releases: releases, registry: registry, now: time.Now, log: slog.New(slog.DiscardHandler)}
	r.acks = newAckBatcher(r)
	for _, opt := range opts {
		opt(r)
	}
	r.views = newViews(r)
	return r
}

// Option configures New.
type Option func(*Rollouts)

// WithClock replaces time.Now, for tests and simulations of deadlines.
func WithClock(now func() time.Time) Option { return func(r *Rollouts) { r.now = now } }

// WithLogger sets where the views report that they read a snapshot again.
func WithLogger(log *slog.Logger) Option { return func(r *Rollouts) { r.log = log } }

// WithAckBatching bounds the batches ACKs are recorded in: at most
// maxAcks ACKs and about maxBytes bytes per store transaction, and at most
// maxWaiting ACKs queued for them (beyond, SubmitAck answers ErrBusy). A
// value of 0 or less keeps the default (DefaultAckBatch,
// DefaultAckBatchBytes, DefaultAcksWaiting); maxAcks 1 records each ACK by
// its own transaction.
func WithAckBatching(maxAcks, maxBytes, maxWaiting int) Option {
	return func(r *Rollouts) {
		if maxAcks > 0 {
			r.acks.maxAcks = maxAcks
		}
		if maxBytes > 0 {
			r.acks.maxBytes = maxBytes
		}
		if maxWaiting > 0 {
			r.acks.maxQueue = maxWaiting
		}
	}
}

// WithAckBatchObserver makes observe hear how many ACKs each store
// transaction that records ACKs held (a metrics histogram). It is called
// from the batches' goroutine and must not block.
func WithAckBatchObserver(observe func(acks int)) Option {
	return func(r *Rollouts) { r.acks.observe = observe }
}

// Run keeps the rollout views current, and records the ACKs submitted
// (SubmitAck, RecordAck) in batches, until ctx ends, and returns then,
// once both stopped: every method waits for the views, so a Rollouts
// serves only while Run runs, and ACKs submitted after it returned are
// refused. It follows the store through a watch hub of its own (its ring
// is the views' buffer against bursts), which it closes on return.
func (r *Rollouts) Run(ctx context.Context) error {
	hub, err := watch.New(ctx, r.store)
	if err != nil {
		r.acks.stop()
		if ctx.Err() != nil {
			return nil // ended before it started: nothing failed
		}
		return fmt.Errorf("rollout: %w", err)
	}
	defer hub.Close()
	var batches sync.WaitGroup
	batches.Go(func() { r.acks.run(ctx) })
	r.views.run(ctx, hub)
	batches.Wait()
	return nil
}

// maxAttempts bounds how often a decision is re-read and made again after
// the records it rested on changed under it. Each retry means another
// writer committed; under any realistic contention a few suffice.
const maxAttempts = 16

// Pointer returns a config's active pointer (generation 0 before the first
// promotion).
func (r *Rollouts) Pointer(ctx context.Context, config string) (Pointer, error) {
	return r.pointerAt(ctx, config, 0)
}

func (r *Rollouts) pointerAt(ctx context.Context, config string, rev int64) (Pointer, error) {
	var p Pointer
	kv, ok, err := getAt(ctx, r.store, records.Pointer(config), rev, &p)
	if err != nil || !ok {
		return Pointer{}, err
	}
	p.Revision = kv.ModRevision
	return p, nil
}

// getAt reads key at rev (0: current) and decodes its JSON into v; ok is
// false when the key does not exist.
func getAt(ctx context.Context, st store.Store, key string, rev int64, v any) (store.KeyValue, bool, error) {
	kv, _, err := st.Get(ctx, key, rev)
	if errors.Is(err, store.ErrNotFound) {
		return store.KeyValue{}, false, nil
	}
	if err != nil {
		return store.KeyValue{}, false, err
	}
	if err := records.Decode(kv, v); err != nil {
		return store.KeyValue{}, false, err
	}
	return kv, true, nil
}

// currentRevision is the store's revision now: what a decision reads at.
func (r *Rollouts) currentRevision(ctx context.Context) (int64, error) {
	st, err := r.store.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("rollout: read the store's revision: %w", err)
	}
	return st.Revision, nil
}
