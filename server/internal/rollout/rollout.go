// Package rollout records ACKs, evaluates stages against a release's frozen
// membership, and moves a config's active pointer by compare-and-swap with
// a promotion receipt (DESIGN.md: ACK, Quorum, Active pointer).
//
// Layout, for config C and generation G, under store.SystemPrefix:
//
//	configs/C/acks/G/<identity>/<time>   every ACK, counted or not, with the reason
//	configs/C/stops/G                    the stop record of a rollout that stopped
//	configs/C/active                     the pointer: generation, epoch, receipt key
//	configs/C/receipts/<key>             one receipt per idempotency key
//
// A release's rollout state moves forward through these records, never by
// editing the release: it is a candidate while its stages are evaluated,
// stopped once a stop record exists (a stage failed or an operator stopped
// it), active while the pointer names it, and superseded or rolled back
// after (see ReleaseStates).
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
	// ErrPromotionUnknown means the store write of a Promote or Rollback
	// ended without a definite answer: it may or may not have committed.
	// *UnknownError names the key to resolve it with (GetPromotion).
	ErrPromotionUnknown = errors.New("rollout: PROMOTION_UNKNOWN")
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
		if ack.Counted && (ack.State == Rejected || (ack.State == HealthyAcked && !ack.HealthOK)) {
			// A rejection may fail a stage: evaluating now writes the stop
			// record at once, so the canaries are called back at once.
			if _, err := r.Status(ctx, ack.ConfigID, ack.Generation); err != nil {
				return Ack{}, fmt.Errorf("rollout: evaluate after a rejection: %w", err)
			}
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
	stop, err := r.GetStop(ctx, ack.ConfigID, ack.Generation)
	if err != nil {
		return false, "", err
	}
	prev, err := r.acks(ctx, ack.ConfigID, ack.Generation, ack.WorkloadIdentity)
	if err != nil {
		return false, "", err
	}
	current, currentEpoch := "", int64(0)
	if rec, err := r.registry.Get(ctx, ack.WorkloadIdentity); err == nil {
		current, currentEpoch = rec.BootID, rec.MembershipEpoch
	} else if !errors.Is(err, instance.ErrNotFound) {
		return false, "", err
	}
	switch {
	case !member:
		return false, "the instance is not in the release's frozen membership", nil
	case current != "" && current != ack.BootID:
		return false, fmt.Sprintf("stale boot %s: the instance registered again as boot %s", ack.BootID, current), nil
	case ack.MembershipEpoch != 0 && currentEpoch != 0 && ack.MembershipEpoch != currentEpoch:
		return false, fmt.Sprintf("stale membership epoch %d: the instance's registration is at epoch %d; register again", ack.MembershipEpoch, currentEpoch), nil
	case ack.ContentDigest != rel.ContentDigest:
		return false, fmt.Sprintf("content digest %s is not the release's %s", ack.ContentDigest, rel.ContentDigest), nil
	case ack.ValidatorDigest != rel.ValidatorDigest:
		return false, fmt.Sprintf("validator digest %s is not the release's %s", ack.ValidatorDigest, rel.ValidatorDigest), nil
	case ptr.Generation > rel.Generation:
		// ACKs of the active release still count: after promotion they
		// are its health, which a rollback decision reads.
		return false, fmt.Sprintf("late: generation %d was superseded (active generation %d)", rel.Generation, ptr.Generation), nil
	case stop != nil:
		return false, fmt.Sprintf("late: the rollout stopped at %s (%s); its evidence is frozen", stop.Time.Format(time.RFC3339), stop.Reason), nil
	}
	var applied *Ack
	for i, p := range prev {
		if p.BootID != ack.BootID || !p.Counted {
			continue
		}
		switch {
		case p.ApplySequence > ack.ApplySequence:
			return false, fmt.Sprintf("out of order: apply sequence %d after %d", ack.ApplySequence, p.ApplySequence), nil
		case p.ApplySequence == ack.ApplySequence && p.State == ack.State:
			return false, fmt.Sprintf("duplicate: %s at apply sequence %d was already counted", ack.State, ack.ApplySequence), nil
		case p.ApplySequence == ack.ApplySequence && p.State == Applied && applied == nil:
			applied = &prev[i]
		}
	}
	if why := healthWindowUnmet(rel, ack, applied); why != "" {
		return false, why, nil
	}
	return true, "", nil
}

// healthWindowUnmet says why a healthy report came too soon, or "" if it did
// not: with a health window, HEALTHY_ACKED counts only when the same boot's
// APPLIED of the same apply sequence arrived at least the window before it.
// An unhealthy report counts at once: a failure needs no waiting.
func healthWindowUnmet(rel release.Release, ack Ack, applied *Ack) string {
	if ack.State != HealthyAcked || !ack.HealthOK || rel.HealthWindow <= 0 {
		return ""
	}
	if applied == nil {
		return fmt.Sprintf("health window: no APPLIED ACK of boot %s at apply sequence %d came first; report APPLIED, then HEALTHY_ACKED after %s",
			ack.BootID, ack.ApplySequence, rel.HealthWindow)
	}
	if held := ack.ReceivedAt.Sub(applied.ReceivedAt); held < rel.HealthWindow {
		return fmt.Sprintf("health window: healthy %s after APPLIED, but the release's health window is %s; report again when it has passed",
			held.Round(time.Millisecond), rel.HealthWindow)
	}
	return ""
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
	err := store.Each(ctx, r.store, prefix, func(kv store.KeyValue) error {
		var a Ack
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return fmt.Errorf("rollout: ACK %s: %w", kv.Key, err)
		}
		// Identities may hold '/': the prefix of "a" also covers "a/b".
		if identity == "" || a.WorkloadIdentity == identity {
			out = append(out, a)
		}
		return nil
	})
	return out, err
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
