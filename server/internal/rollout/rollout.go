// Package rollout records ACKs, evaluates stages against a release's frozen
// membership, and moves a config's active pointer by compare-and-swap with
// a promotion receipt (DESIGN.md: ACK, Quorum, Active pointer).
//
// Layout, for config C and generation G, under store.SystemPrefix:
//
//	configs/C/acks/G/<identity>/<time>   every ACK, counted or not, with the reason
//	configs/C/active                     the pointer: generation, epoch, receipt key
//	configs/C/receipts/<key>             one receipt per idempotency key
//
// The pointer and its receipt are written in one store transaction that
// compares the pointer's revision and the receipt's absence: of concurrent
// promotions exactly one commits, and retrying with the same idempotency
// key returns the receipt that was written.
package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/store"
)

var (
	// ErrInvalid means a malformed request.
	ErrInvalid = errors.New("rollout: invalid request")
	// ErrPointerMoved means the active pointer is not what the caller
	// expected (or another promotion won the race); *PointerError says
	// where it is.
	ErrPointerMoved = errors.New("rollout: the active pointer moved")
	// ErrNotReady means the release does not meet the conditions of
	// promotion (its stages, digests or deadline).
	ErrNotReady = errors.New("rollout: release not ready for promotion")
	// ErrNoPromotion means no receipt has that idempotency key.
	ErrNoPromotion = errors.New("rollout: no promotion with that idempotency key")
)

// PointerError reports the pointer as it is. It matches ErrPointerMoved.
type PointerError struct {
	// Pointer is the active pointer now.
	Pointer Pointer
}

func (e *PointerError) Error() string {
	return fmt.Sprintf("rollout: the active pointer is at generation %d epoch %d", e.Pointer.Generation, e.Pointer.Epoch)
}

// Is reports whether target is ErrPointerMoved.
func (e *PointerError) Is(target error) bool { return target == ErrPointerMoved }

// AckState is the state an instance reports for a release.
type AckState string

// The states of DESIGN.md.
const (
	Discovered   AckState = "DISCOVERED"
	Downloaded   AckState = "DOWNLOADED"
	Validated    AckState = "VALIDATED"
	Staged       AckState = "STAGED"
	Applied      AckState = "APPLIED"
	HealthyAcked AckState = "HEALTHY_ACKED"
	Rejected     AckState = "REJECTED"
	Stale        AckState = "STALE"
)

var knownStates = map[AckState]bool{Discovered: true, Downloaded: true, Validated: true, Staged: true, Applied: true, HealthyAcked: true, Rejected: true, Stale: true}

// Ack is one report from an instance.
type Ack struct {
	ConfigID         string    `json:"config_id"`
	Generation       int64     `json:"generation"`
	WorkloadIdentity string    `json:"workload_identity"`
	BootID           string    `json:"boot_id"`
	MembershipEpoch  int64     `json:"membership_epoch"`
	ContentDigest    string    `json:"content_digest"`
	ValidatorDigest  string    `json:"validator_digest"`
	AppArtifact      string    `json:"app_artifact"`
	ApplySequence    int64     `json:"apply_sequence"`
	State            AckState  `json:"state"`
	HealthOK         bool      `json:"health_ok"`
	Reason           string    `json:"reason,omitempty"`
	TraceParent      string    `json:"traceparent,omitempty"`
	ReceivedAt       time.Time `json:"received_at"`
	// Counted says whether the ACK counts toward quorum; Why says why not.
	Counted bool   `json:"counted"`
	Why     string `json:"why,omitempty"`
}

// Pointer is a config's active pointer.
type Pointer struct {
	Generation int64  `json:"generation"`
	Epoch      int64  `json:"epoch"`
	ReceiptKey string `json:"receipt_key"`
	// HighWater is the highest generation ever promoted. A release at or
	// below it was active once (and may have been rolled back): it is never
	// offered as a canary again.
	HighWater int64 `json:"high_water"`
	// Revision is the store revision of the pointer (0: never set).
	Revision int64 `json:"-"`
}

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
	// Revision is the store revision of the receipt.
	Revision int64 `json:"-"`
}

// Rollouts records ACKs and moves pointers.
type Rollouts struct {
	store    store.Store
	releases *release.Releases
	registry *instance.Registry
	now      func() time.Time
}

// New returns Rollouts over st.
func New(st store.Store, releases *release.Releases, registry *instance.Registry, opts ...Option) *Rollouts {
	r := &Rollouts{store: st, releases: releases, registry: registry, now: time.Now}
	for _, opt := range opts {
		opt(r)
	}
	return r
}

// Option configures New.
type Option func(*Rollouts)

// WithClock replaces time.Now, for tests and simulations of deadlines.
func WithClock(now func() time.Time) Option { return func(r *Rollouts) { r.now = now } }

func configKey(config, rest string) string {
	return store.SystemPrefix + "configs/" + config + "/" + rest
}

// RecordAck stores ack, counted or with the reason it does not count, and
// returns it as stored. Only a malformed ACK or a store failure is an
// error: late, duplicate, stale and out-of-membership ACKs are kept.
func (r *Rollouts) RecordAck(ctx context.Context, ack Ack) (Ack, error) {
	if ack.WorkloadIdentity == "" || ack.BootID == "" || !knownStates[ack.State] || ack.ApplySequence < 0 {
		return Ack{}, fmt.Errorf("%w: an ACK needs a workload identity, a boot ID, a known state and a non-negative apply sequence", ErrInvalid)
	}
	rel, err := r.releases.Get(ctx, ack.ConfigID, ack.Generation)
	if err != nil {
		return Ack{}, err
	}
	ack.ReceivedAt = r.now().UTC()
	ack.Counted, ack.Why, err = r.judge(ctx, rel, ack)
	if err != nil {
		return Ack{}, err
	}
	b, err := json.Marshal(ack)
	if err != nil {
		return Ack{}, fmt.Errorf("rollout: encode ACK: %w", err)
	}
	// The key orders an instance's ACKs by arrival; two arriving in the
	// same nanosecond take the next free one.
	for nanos := ack.ReceivedAt.UnixNano(); ; nanos++ {
		key := configKey(ack.ConfigID, fmt.Sprintf("acks/%020d/%s/%020d", ack.Generation, ack.WorkloadIdentity, nanos))
		_, err := r.store.Put(ctx, store.Put{Key: key, Value: b, ExpectModRevision: new(int64)})
		if errors.Is(err, store.ErrRevisionMismatch) {
			continue
		}
		if err != nil {
			return Ack{}, fmt.Errorf("rollout: store ACK: %w", err)
		}
		return ack, nil
	}
}

// judge decides whether ack counts.
func (r *Rollouts) judge(ctx context.Context, rel release.Release, ack Ack) (bool, string, error) {
	member := false
	for _, m := range rel.Membership {
		if m.ID == ack.WorkloadIdentity {
			member = true
		}
	}
	ptr, err := r.Pointer(ctx, ack.ConfigID)
	if err != nil {
		return false, "", err
	}
	prev, err := r.acks(ctx, ack.ConfigID, ack.Generation, ack.WorkloadIdentity)
	if err != nil {
		return false, "", err
	}
	current := ""
	if rec, err := r.registry.Get(ctx, ack.WorkloadIdentity); err == nil {
		current = rec.BootID
	} else if !errors.Is(err, instance.ErrNotFound) {
		return false, "", err
	}
	switch {
	case !member:
		return false, "the instance is not in the release's frozen membership", nil
	case current != "" && current != ack.BootID:
		return false, fmt.Sprintf("stale boot %s: the instance registered again as boot %s", ack.BootID, current), nil
	case ack.ContentDigest != rel.ContentDigest:
		return false, fmt.Sprintf("content digest %s is not the release's %s", ack.ContentDigest, rel.ContentDigest), nil
	case ack.ValidatorDigest != rel.ValidatorDigest:
		return false, fmt.Sprintf("validator digest %s is not the release's %s", ack.ValidatorDigest, rel.ValidatorDigest), nil
	case ptr.Generation > rel.Generation:
		// ACKs of the active release still count: after promotion they
		// are its health, which a rollback decision reads.
		return false, fmt.Sprintf("late: generation %d was superseded (active generation %d)", rel.Generation, ptr.Generation), nil
	}
	for _, p := range prev {
		if p.BootID != ack.BootID || !p.Counted {
			continue
		}
		switch {
		case p.ApplySequence > ack.ApplySequence:
			return false, fmt.Sprintf("out of order: apply sequence %d after %d", ack.ApplySequence, p.ApplySequence), nil
		case p.ApplySequence == ack.ApplySequence && p.State == ack.State:
			return false, fmt.Sprintf("duplicate: %s at apply sequence %d was already counted", ack.State, ack.ApplySequence), nil
		}
	}
	return true, "", nil
}

// Acks returns every ACK of a generation, counted or not, in arrival order
// per instance.
func (r *Rollouts) Acks(ctx context.Context, config string, gen int64) ([]Ack, error) {
	return r.acks(ctx, config, gen, "")
}

func (r *Rollouts) acks(ctx context.Context, config string, gen int64, identity string) ([]Ack, error) {
	prefix := configKey(config, fmt.Sprintf("acks/%020d/", gen))
	if identity != "" {
		prefix += identity + "/"
	}
	var out []Ack
	after := ""
	for {
		page, err := r.store.List(ctx, prefix, 0, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, kv := range page.KVs {
			var a Ack
			if err := json.Unmarshal(kv.Value, &a); err != nil {
				return nil, fmt.Errorf("rollout: ACK %s: %w", kv.Key, err)
			}
			out = append(out, a)
		}
		if !page.More {
			return out, nil
		}
		after = page.KVs[len(page.KVs)-1].Key
	}
}

// States reduces a generation's counted ACKs to each member's latest
// state: healthy (HEALTHY_ACKED with a passing health window), rejected, or
// pending.
func States(acks []Ack) map[string]quorum.State {
	return quorumStates(latestCounted(acks))
}

// latestCounted is each instance's latest counted ACK: the highest apply
// sequence, and of equal ones the last to arrive.
func latestCounted(acks []Ack) map[string]Ack {
	latest := map[string]Ack{}
	for _, a := range acks {
		if l, ok := latest[a.WorkloadIdentity]; a.Counted && (!ok || a.ApplySequence >= l.ApplySequence) {
			latest[a.WorkloadIdentity] = a
		}
	}
	return latest
}

// quorumStates maps latest ACKs to what quorum counts.
func quorumStates(latest map[string]Ack) map[string]quorum.State {
	states := map[string]quorum.State{}
	for id, a := range latest {
		switch {
		case a.State == Rejected || (a.State == HealthyAcked && !a.HealthOK):
			states[id] = quorum.Rejected
		case a.State == HealthyAcked:
			states[id] = quorum.Healthy
		}
	}
	return states
}

// StageResult is one stage's evaluation.
type StageResult struct {
	Name       string
	Evaluation quorum.Evaluation
	// States counts the stage's members by their latest counted state
	// ("NO_ACK" for none), overall and per zone.
	States     map[string]int
	ZoneStates map[string]map[string]int
}

// Evaluate evaluates every stage of a release against its members.
func (r *Rollouts) Evaluate(ctx context.Context, config string, gen int64) (release.Release, []StageResult, error) {
	rel, err := r.releases.Get(ctx, config, gen)
	if err != nil {
		return release.Release{}, nil, err
	}
	acks, err := r.Acks(ctx, config, gen)
	if err != nil {
		return release.Release{}, nil, err
	}
	latest := latestCounted(acks)
	states := quorumStates(latest)
	var out []StageResult
	for _, st := range rel.Stages {
		res := StageResult{Name: st.Name, States: map[string]int{}, ZoneStates: map[string]map[string]int{}}
		var members []quorum.Member
		for _, m := range rel.Membership {
			if !instance.Matches(m.Labels, st.Selector) {
				continue
			}
			members = append(members, m)
			state := string(latest[m.ID].State)
			if state == "" {
				state = "NO_ACK"
			}
			res.States[state]++
			if res.ZoneStates[m.Zone] == nil {
				res.ZoneStates[m.Zone] = map[string]int{}
			}
			res.ZoneStates[m.Zone][state]++
		}
		res.Evaluation = quorum.Evaluate(st.Policy, members, states)
		if deadline := rel.CreatedAt.Add(rel.Deadline); res.Evaluation.Outcome == quorum.Waiting && r.now().After(deadline) {
			// A stage still waiting at the release's deadline has failed;
			// its tallies stay as the evidence.
			res.Evaluation.Outcome = quorum.Failed
			res.Evaluation.Reason = fmt.Sprintf("the deadline passed at %s while %s", deadline.Format(time.RFC3339), res.Evaluation.Reason)
		}
		out = append(out, res)
	}
	return rel, out, nil
}

// Pointer returns a config's active pointer (generation 0 before the first
// promotion).
func (r *Rollouts) Pointer(ctx context.Context, config string) (Pointer, error) {
	kv, _, err := r.store.Get(ctx, configKey(config, "active"), 0)
	if errors.Is(err, store.ErrNotFound) {
		return Pointer{}, nil
	}
	if err != nil {
		return Pointer{}, err
	}
	var p Pointer
	if err := json.Unmarshal(kv.Value, &p); err != nil {
		return Pointer{}, fmt.Errorf("rollout: pointer of %s: %w", config, err)
	}
	p.Revision = kv.ModRevision
	return p, nil
}

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
// it, every stage of the release passed, and its deadline has not passed.
// A repeat with the same idempotency key returns the receipt written.
func (r *Rollouts) Promote(ctx context.Context, m Move) (Receipt, error) {
	if done, err := r.existing(ctx, m); done != nil || err != nil {
		return derefReceipt(done), err
	}
	ptr, err := r.checkPointer(ctx, m)
	if err != nil {
		return Receipt{}, err
	}
	rel, stages, err := r.Evaluate(ctx, m.ConfigID, m.To)
	if err != nil {
		return Receipt{}, err
	}
	if m.To <= ptr.Generation {
		return Receipt{}, fmt.Errorf("%w: generation %d is not after the active generation %d; use rollback to go back", ErrNotReady, m.To, ptr.Generation)
	}
	if deadline := rel.CreatedAt.Add(rel.Deadline); r.now().After(deadline) {
		return Receipt{}, fmt.Errorf("%w: its deadline passed at %s", ErrNotReady, deadline.Format(time.RFC3339))
	}
	var evidence []quorum.Evaluation
	var names []string
	for _, s := range stages {
		if s.Evaluation.Outcome != quorum.Passed {
			return Receipt{}, fmt.Errorf("%w: stage %q is %s: %s", ErrNotReady, s.Name, s.Evaluation.Outcome, s.Evaluation.Reason)
		}
		evidence = append(evidence, s.Evaluation)
		names = append(names, s.Name)
	}
	return r.write(ctx, m, ptr, Receipt{ConfigID: m.ConfigID, From: ptr.Generation, To: m.To, Epoch: ptr.Epoch, Evidence: evidence, StageNames: names})
}

// Rollback moves the pointer back to the active release's predecessor, as
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
	active, err := r.releases.Get(ctx, m.ConfigID, ptr.Generation)
	if err != nil {
		return Receipt{}, err
	}
	if active.Predecessor == 0 {
		return Receipt{}, fmt.Errorf("%w: generation %d has no predecessor to roll back to", ErrNotReady, ptr.Generation)
	}
	return r.write(ctx, m, ptr, Receipt{ConfigID: m.ConfigID, From: ptr.Generation, To: active.Predecessor, Epoch: ptr.Epoch + 1, Rollback: true})
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
	page, err := r.store.List(ctx, configKey(config, "receipts/"), 0, "", 1000)
	if err != nil {
		return nil, err
	}
	var out []Receipt
	for _, kv := range page.KVs {
		var rc Receipt
		if err := json.Unmarshal(kv.Value, &rc); err != nil {
			return nil, err
		}
		rc.Revision = kv.ModRevision
		out = append(out, rc)
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
		return Receipt{}, fmt.Errorf("rollout: write receipt: %w", err)
	}
	rc.Revision = res.Revision - 1
	return rc, nil
}
