package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/validators/host"
)

// AckState is the state an instance reports for a release.
type AckState string

// The instance states, in the order an apply goes through them; REJECTED
// ends an apply that failed, STALE says the instance holds a generation its
// assignment moved past.
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

// stateRank orders the states of one apply: within an apply sequence a
// state may not follow a later one. REJECTED and STALE may come at any
// point.
var stateRank = map[AckState]int{Discovered: 1, Downloaded: 2, Validated: 3, Staged: 4, Applied: 5, HealthyAcked: 6, Rejected: 7, Stale: 7}

// Health is what an instance measured over its health window.
type Health struct {
	// ErrorRate is the share of failed requests, in [0, 1].
	ErrorRate float64 `json:"error_rate"`
	// P99 is the 99th percentile latency.
	P99 time.Duration `json:"p99"`
}

// Ack is one report from an instance.
type Ack struct {
	ConfigID         string   `json:"config_id"`
	Generation       int64    `json:"generation"`
	WorkloadIdentity string   `json:"workload_identity"`
	BootID           string   `json:"boot_id"`
	MembershipEpoch  int64    `json:"membership_epoch"`
	ContentDigest    string   `json:"content_digest"`
	ValidatorDigest  string   `json:"validator_digest"`
	AppArtifact      string   `json:"app_artifact"`
	ApplySequence    int64    `json:"apply_sequence"`
	State            AckState `json:"state"`
	HealthOK         bool     `json:"health_ok"`
	Health           *Health  `json:"health,omitempty"`
	Reason           string   `json:"reason,omitempty"`
	TraceParent      string   `json:"traceparent,omitempty"`
	// ReportID is the reporter's number for the report, unique within its
	// boot (0: none): the same report sent again (after a lost answer or a
	// cut session) is answered with the ACK stored the first time, not
	// judged or stored again.
	ReportID uint64 `json:"report_id,omitempty"`
	// TraceID is the trace ID of TraceParent, set by RecordAck.
	TraceID    string    `json:"trace_id,omitempty"`
	ReceivedAt time.Time `json:"received_at"`
	// Counted says whether the ACK counts toward quorum; Why says why not.
	Counted bool   `json:"counted"`
	Why     string `json:"why,omitempty"`
	// arrival orders the ACKs of one instance: the nanosecond in its key.
	arrival int64
	// Breach says how a counted HEALTHY_ACKED broke its stage's health
	// budget: it then counts as a rejection.
	Breach string `json:"breach,omitempty"`
	// Held is, for HEALTHY_ACKED, how long the instance had run the apply
	// when it reported, by its own monotonic clock: one machine's measure,
	// which no skew between servers and no step of a wall clock shortens.
	Held time.Duration `json:"held,omitempty"`
	// AppVersion is the application version the instance reports running
	// ("": not reported; its registration's version is judged all the same).
	AppVersion string `json:"app_version,omitempty"`
	// Shadow says a counted ACK was reported against a shadow assignment
	// (to validate, not apply): it counts toward the instance's shadow
	// stage only, never toward the stage that later assigns the release
	// to it to apply.
	Shadow bool `json:"shadow,omitempty"`
	// Violations are, for REJECTED, the validator's violations the
	// instance reported (at most MaxAckViolations), with the release's
	// secret values redacted as from Reason.
	Violations []host.Violation `json:"violations,omitempty"`
	// RejectCode is, for REJECTED, which step refused the release
	// (INVALID_CONTENT, VALIDATOR_FAILED, ...; "" when not said).
	RejectCode string `json:"reject_code,omitempty"`
}

// MaxAckViolations bounds the violations one ACK carries: those of a
// validator's verdict that tell an operator what to fix, not a dump the
// store keeps for every instance (the SDK cuts its list to fit).
const MaxAckViolations = 256

// check refuses a malformed ACK.
func (a Ack) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case a.WorkloadIdentity == "" || a.BootID == "":
		return bad("an ACK needs the instance's workload identity and boot ID")
	case stateRank[a.State] == 0:
		return bad("state %q is not an instance state (DISCOVERED, DOWNLOADED, VALIDATED, STAGED, APPLIED, HEALTHY_ACKED, REJECTED, STALE)", a.State)
	case a.ApplySequence < 0:
		return bad("apply sequence %d is negative", a.ApplySequence)
	case a.MembershipEpoch <= 0:
		return bad("membership_epoch is required: send the epoch Register returned (the instance's registration the ACK comes from)")
	case a.Health != nil && (math.IsNaN(a.Health.ErrorRate) || a.Health.ErrorRate < 0 || a.Health.ErrorRate > 1):
		return bad("health error rate %v must be in [0, 1]", a.Health.ErrorRate)
	case a.Health != nil && a.Health.P99 < 0:
		return bad("health p99 latency %s is negative", a.Health.P99)
	case a.Held < 0:
		return bad("held %s is negative: report how long the instance has run the apply", a.Held)
	case a.State != Rejected && (len(a.Violations) > 0 || a.RejectCode != ""):
		return bad("violations and reject_code belong to a REJECTED ACK, not %s", a.State)
	case len(a.Violations) > MaxAckViolations:
		return bad("violations has %d entries; the limit is %d: send the first %d", len(a.Violations), MaxAckViolations, MaxAckViolations)
	case !a.validUTF8():
		return bad("an ACK's text must be valid UTF-8")
	}
	return nil
}

// validUTF8 reports whether every text of a is valid UTF-8, as every
// ACK decoded from the wire is: its stored record then reads back as it
// was judged (JSON would replace an invalid byte), so that the views may
// take a batch's ACKs as written (writtenRecords).
func (a Ack) validUTF8() bool {
	for _, s := range []string{a.ConfigID, a.WorkloadIdentity, a.BootID, a.ContentDigest, a.ValidatorDigest, a.AppArtifact,
		string(a.State), a.Reason, a.TraceParent, a.AppVersion, a.RejectCode} {
		if !utf8.ValidString(s) {
			return false
		}
	}
	for _, v := range a.Violations {
		if !utf8.ValidString(v.Path) || !utf8.ValidString(v.Message) || !utf8.ValidString(string(v.Severity)) {
			return false
		}
	}
	return true
}

// RecordAck judges ack, stores it, counted or with the reason it does not
// count, and returns it as stored. Only a malformed ACK, an unknown release
// or a store failure is an error: late, duplicate, stale and
// out-of-membership ACKs are kept.
//
// The judgement reads the release's records at one revision, and the ACK
// is stored only if the pointer, the stop record, the instance's
// registration and retirement and its earlier ACKs are unchanged since;
// otherwise it is judged again. An APPLIED or HEALTHY_ACKED from the
// instance's current registration also becomes its applied record for the
// config, in the same write. A counted HEALTHY_ACKED, VALIDATED or REJECTED
// then settles the rollout, which may pass a stage or stop it; when that
// fails, the error says the ACK was stored, and the same ACK sent again is
// a duplicate that settles again.
//
// An ACK with a report ID (ReportID) that names a stored ACK of the same
// boot of the instance, for the same release, is a report sent again: it
// is not judged or stored again, and the answer is the stored ACK, counted
// or not as it was then (see MaxAcksPerInstance for one no longer kept).
//
// RecordAck is SubmitAck waited for: it goes through the same batches, and
// may be called concurrently. When ctx ends before the ACK was taken into
// a batch, it returns ctx's error and the ACK is not recorded; once taken,
// it returns what the batch did.
func (r *Rollouts) RecordAck(ctx context.Context, ack Ack) (Ack, error) {
	res := <-r.SubmitAck(ctx, ack)
	return res.Ack, res.Err
}

// prepare checks a submitted ACK and sets what RecordAck derives from it
// before judging: its trace ID.
func (a *Ack) prepare() error {
	if err := a.check(); err != nil {
		return err
	}
	traceID, err := TraceID(a.TraceParent)
	if err != nil {
		return err
	}
	a.TraceID = traceID
	return nil
}

// recordAlone is RecordAck without batches: one ACK judged and stored by
// its own transaction, then settled. It is what RecordAck did before ACKs
// were batched, kept to compare with (the benchmarks).
func (r *Rollouts) recordAlone(ctx context.Context, ack Ack) (Ack, error) {
	if err := ack.prepare(); err != nil {
		return Ack{}, err
	}
	stored, rev, err := r.recordOne(ctx, ack, maxAttempts)
	if err != nil {
		return Ack{}, err
	}
	if settles(stored) {
		if err := r.settleAt(ctx, stored.ConfigID, stored.Generation, rev); err != nil {
			return Ack{}, settleFailed(err)
		}
	}
	return stored, nil
}

// recordOne judges a prepared ACK and stores it by its own transaction,
// judging it again, after the views caught up, while what the judgement
// rests on changes under it: at most attempts judgements, then
// ErrContended. It returns the ACK as stored and the revision the rollout
// is to be settled at.
func (r *Rollouts) recordOne(ctx context.Context, ack Ack, attempts int) (Ack, int64, error) {
	for range attempts {
		av, err := r.ackViewOf(ctx, ack.ConfigID, ack.Generation, ack.WorkloadIdentity)
		if err != nil {
			return Ack{}, 0, err
		}
		w, err := r.decideAck(ctx, ack, av)
		if err != nil {
			return Ack{}, 0, err
		}
		if w.resent {
			return w.ack, w.rev, nil
		}
		res, err := r.store.Txn(ctx, store.Txn{Compares: w.compares, Unchanged: w.unchanged, Puts: w.puts, Deletes: w.deletes})
		if errors.Is(err, store.ErrRevisionMismatch) {
			// The views lagged what the judgement rests on: catch up, judge again.
			if err := r.wait(ctx, true); err != nil {
				return Ack{}, 0, err
			}
			continue
		}
		if err != nil {
			return Ack{}, 0, fmt.Errorf("rollout: store ACK: %w", err)
		}
		return w.ack, res.Revision, nil
	}
	return Ack{}, 0, contended(ack, attempts)
}

func contended(ack Ack, attempts int) error {
	return fmt.Errorf("%w: the ACK of %s for %s generation %d was judged %d times", ErrContended, ack.WorkloadIdentity, ack.ConfigID, ack.Generation, attempts)
}

// settles reports whether a stored ACK settles its rollout. Only a
// HEALTHY_ACKED, VALIDATED or REJECTED can pass a stage (VALIDATED, in a
// shadow stage) or fail one. A duplicate settles too: a client that
// retried after losing the first answer must not leave a step unrecorded.
func settles(a Ack) bool {
	return (a.Counted || isDuplicate(a.Why)) && (a.State == HealthyAcked || a.State == Validated || a.State == Rejected)
}

func settleFailed(err error) error {
	return fmt.Errorf("rollout: the ACK was stored, and settling the rollout after it failed (send it again: "+
		"it is then a duplicate, and settles again): %w", err)
}

// ackWrite is one judged ACK and the write that stores it.
type ackWrite struct {
	// ack is the ACK as judged, or, when resent, as stored the first time.
	ack Ack
	// resent says ack names an ACK stored before: nothing is written.
	resent bool
	// rev is the revision the judgement read at.
	rev int64
	// The write: stored only if nothing the judgement read changed since
	// rev (unchanged, compares).
	puts []store.Put
	// readBack are, decoded, the records of puts that the views read
	// back: the ACK's record (unless it would not read back as judged:
	// text that redaction left invalid UTF-8), and its applied record
	// when it writes one.
	readBack  []writtenRecord
	deletes   []string
	unchanged []store.Unchanged
	compares  []store.Compare
}

// decideAck judges a prepared ACK against av and says what storing it
// writes, and on what condition; or, for a report sent again, finds the
// ACK stored the first time.
func (r *Rollouts) decideAck(ctx context.Context, ack Ack, av ackView) (ackWrite, error) {
	if ack.ReportID != 0 {
		first, ok, err := r.resent(ctx, ack, av)
		if err != nil || ok {
			return ackWrite{ack: first, resent: true, rev: av.rev}, err
		}
	}
	ack.ReceivedAt = r.now().UTC()
	// Whoever reads the rollout's status reads the reason: never a secret
	// value of the release.
	ack.Reason = av.rel.RedactSecrets(ack.Reason)
	if len(ack.Violations) > 0 {
		redacted := make([]host.Violation, len(ack.Violations))
		for i, v := range ack.Violations {
			v.Path, v.Message = av.rel.RedactSecrets(v.Path), av.rel.RedactSecrets(v.Message)
			redacted[i] = v
		}
		ack.Violations = redacted
	}
	ack.Counted, ack.Why, ack.Breach = judge(av.snapshot, av.plan, ack, av.reg, av.registered, av.prior)
	ack.Shadow = ack.Counted && reportedInShadow(av.snapshot, av.plan, ack.WorkloadIdentity)
	// The key orders an instance's ACKs by arrival; of two in the same
	// nanosecond, the second takes the next one.
	ack.arrival = max(ack.ReceivedAt.UnixNano(), av.arrival+1)
	b, err := records.Encode(ack)
	if err != nil {
		return ackWrite{}, err
	}
	w := ackWrite{ack: ack, rev: av.rev}
	w.puts = []store.Put{{Key: records.Ack(ack.ConfigID, ack.Generation, ack.WorkloadIdentity, ack.arrival), Value: b}}
	if ack.validUTF8() { // redaction may cut a character: JSON then stores U+FFFD, and the views decode the record
		held := ack
		if held.Health != nil { // the views' own, not the submitter's
			h := *held.Health
			held.Health = &h
		}
		w.readBack = append(w.readBack, writtenRecord{key: w.puts[0].Key, value: b, ack: &held})
	}
	if rec, ok := newApplied(ack, av.reg, av.registered, av.applied); ok {
		ab, err := records.Encode(rec)
		if err != nil {
			return ackWrite{}, err
		}
		put := store.Put{Key: records.Applied(ack.ConfigID, ack.WorkloadIdentity), Value: ab}
		w.puts = append(w.puts, put)
		w.readBack = append(w.readBack, writtenRecord{key: put.Key, value: ab, applied: &rec})
	}
	if ev, ok, err := evidencePut(av.prior, ack); err != nil {
		return ackWrite{}, err
	} else if ok {
		w.puts = append(w.puts, ev)
	}
	// The instance's oldest ACKs beyond the bound go in the same write.
	for _, arrival := range evicted(av.stored) {
		w.deletes = append(w.deletes, records.Ack(ack.ConfigID, ack.Generation, ack.WorkloadIdentity, arrival))
	}
	// Stored only if nothing the judgement read changed since: the pointer,
	// the newest release, the rollout's stop record, progress and
	// retirements, the instance's registration, its ACKs and its applied
	// record.
	w.unchanged = append(releaseUnchanged(ack.ConfigID, ack.Generation, av.rev), instanceUnchanged(ack, av.rev)...)
	// The applied record by its revision, not as a prefix: the prefix of
	// "pay-1"'s record is also that of "pay-10"'s, whose every report would
	// make this one's write fail.
	var appliedRev int64
	if av.applied != nil {
		appliedRev = av.applied.rev
	}
	w.compares = []store.Compare{{Key: records.Applied(ack.ConfigID, ack.WorkloadIdentity), ModRevision: appliedRev}}
	return w, nil
}

// releaseUnchanged are the conditions of an ACK's write on its release's
// records: the pointer, the newest release, the stop record, progress and
// retirements.
func releaseUnchanged(config string, gen, rev int64) []store.Unchanged {
	return []store.Unchanged{
		{Prefix: records.Pointer(config), Since: rev},
		{Prefix: records.Head(config), Since: rev},
		{Prefix: records.Stop(config, gen), Since: rev},
		{Prefix: records.Progress(config, gen), Since: rev},
		{Prefix: records.RetiredOf(config, gen), Since: rev},
	}
}

// instanceUnchanged are the conditions of an ACK's write on its
// instance's records: its registration and its ACKs of the release (its
// applied record is compared by revision).
func instanceUnchanged(ack Ack, rev int64) []store.Unchanged {
	return []store.Unchanged{
		{Prefix: instance.RegistrationKey(ack.WorkloadIdentity), Since: rev},
		{Prefix: records.AcksOf(ack.ConfigID, ack.Generation, ack.WorkloadIdentity), Since: rev},
	}
}

// resent finds the stored ACK that ack, a report with an ID, is sent
// again of: one of the same boot with the same report ID among the
// instance's stored ACKs of the release (ok false: none is kept). A stored
// ACK under the same ID that reports something else (another state, apply
// sequence or registration) is a client's error, refused.
func (r *Rollouts) resent(ctx context.Context, ack Ack, av ackView) (Ack, bool, error) {
	for i := len(av.stored) - 1; i >= 0; i-- {
		s := av.stored[i]
		if s.reportID != ack.ReportID || s.boot != ack.BootID {
			continue
		}
		key := records.Ack(ack.ConfigID, ack.Generation, ack.WorkloadIdentity, s.arrival)
		kv, _, err := r.store.Get(ctx, key, av.rev)
		if errors.Is(err, store.ErrCompacted) {
			kv, _, err = r.store.Get(ctx, key, 0) // the views read at a revision compacted since
		}
		if errors.Is(err, store.ErrNotFound) {
			return Ack{}, false, nil // replaced since (see MaxAcksPerInstance): judged anew
		}
		if err != nil {
			return Ack{}, false, fmt.Errorf("rollout: read the ACK that report %d of boot %s names: %w", ack.ReportID, ack.BootID, err)
		}
		first, err := decodeAck(kv)
		if err != nil {
			return Ack{}, false, err
		}
		if first.State != ack.State || first.ApplySequence != ack.ApplySequence || first.MembershipEpoch != ack.MembershipEpoch {
			return Ack{}, false, fmt.Errorf("%w: report_id %d of boot %s names a stored report of %s at apply sequence %d (membership epoch %d), not %s at apply sequence %d (epoch %d): "+
				"give each report its own ID, and send a report again only with its own", ErrInvalid, ack.ReportID, ack.BootID,
				first.State, first.ApplySequence, first.MembershipEpoch, ack.State, ack.ApplySequence, ack.MembershipEpoch)
		}
		return first, true, nil
	}
	return Ack{}, false, nil
}

// MaxAcksPerInstance bounds the ACKs the store keeps of one instance for
// one release (config and generation): a newer ACK replaces the oldest
// beyond it, uncounted ones (duplicates, late, out of order, ...) first,
// then counted ones. A normal apply counts at most seven reports (one per
// state), so the reports judgement rests on stay while an instance that
// sends the same report again and again, or retries in a loop, keeps only
// its latest few: it cannot fill the store, and judging its next report
// reads at most this many.
//
// A report sent again by its report ID finds the first send while the
// store keeps it. Only a newer report of the same release can replace it,
// so a client that resends what went unanswered before it reports
// anything new (as after a cut) always gets the first answer. Once
// replaced, the resend is judged anew like any report: if it counted the
// first time and its counted original was replaced, the resend may count
// again; otherwise it is a duplicate or out of order, stored uncounted (a
// duplicate settles the rollout again, which records nothing twice).
const MaxAcksPerInstance = 16

// evicted are the arrivals of the stored ACKs (in arrival order) that a
// new one replaces: those beyond MaxAcksPerInstance - 1, the oldest
// uncounted first, then the oldest counted.
func evicted(stored []storedAck) []int64 {
	n := len(stored) + 1 - MaxAcksPerInstance
	if n <= 0 {
		return nil
	}
	var out []int64
	for _, counted := range []bool{false, true} {
		for _, s := range stored {
			if len(out) == n {
				return out
			}
			if s.counted == counted {
				out = append(out, s.arrival)
			}
		}
	}
	return out
}

// AckKey is the key a stored ACK lives at, for listings that continue
// after it.
func AckKey(a Ack) string {
	return records.Ack(a.ConfigID, a.Generation, a.WorkloadIdentity, a.arrival)
}

func isDuplicate(why string) bool { return len(why) >= 10 && why[:10] == "duplicate:" }

// judge decides whether ack counts, from the snapshot of its release, the
// plan of its stages, the instance's registration (registered false: it
// has none) and its earlier ACKs of the release. It returns the reason it
// does not count, or for a counted HEALTHY_ACKED outside its stage's
// budget, the breach.
func judge(s snapshot, p plan, ack Ack, reg registration, registered bool, prev []Ack) (counted bool, why, breach string) {
	rel := s.rel
	_, member := p.position(ack.WorkloadIdentity)
	retired, isRetired := s.retired[ack.WorkloadIdentity]
	switch {
	case isRetired:
		return false, fmt.Sprintf("retired from the membership at %s by %s: %s", retired.Time.Format(time.RFC3339), retired.Actor, retired.Reason), ""
	case !member:
		return false, "the instance is not in the release's frozen membership", ""
	case !registered:
		return false, "the instance is not registered; register, then report", ""
	case reg.boot != ack.BootID:
		return false, fmt.Sprintf("stale boot %s: the instance registered again as boot %s", ack.BootID, reg.boot), ""
	case reg.epoch != ack.MembershipEpoch:
		return false, fmt.Sprintf("stale membership epoch %d: the instance's registration is at epoch %d; report with that epoch", ack.MembershipEpoch, reg.epoch), ""
	case rel.RequireInstanceCredential && !reg.credentialed:
		return false, "the instance's registration was not made with an instance credential, and the release counts only those", ""
	case !mayRun(rel, reg.appVersion):
		return false, fmt.Sprintf("app version below minimum: the instance registered with app version %q, below the release's minimum %s; "+
			"it is not assigned the release", reg.appVersion, rel.MinAppVersion), ""
	case ack.AppVersion != "" && !mayRun(rel, ack.AppVersion):
		return false, fmt.Sprintf("app version below minimum: the ACK reports app version %q, below the release's minimum %s", ack.AppVersion, rel.MinAppVersion), ""
	case ack.ContentDigest != rel.ContentDigest:
		return false, fmt.Sprintf("content digest %s is not the release's %s", ack.ContentDigest, rel.ContentDigest), ""
	case ack.ValidatorDigest != rel.ValidatorDigest:
		return false, fmt.Sprintf("validator digest %s is not the release's %s", ack.ValidatorDigest, rel.ValidatorDigest), ""
	}
	if over := s.over(); over != "" {
		return false, "late: " + over, ""
	}
	stage := p.budgetStage(ack.WorkloadIdentity)
	if rel.Generation != s.ptr.Generation {
		// A candidate: only the instances its reached stages assigned it
		// to, and a shadow stage's only to validate.
		i, shadow, assigned := p.assignedBy(s.progress, ack.WorkloadIdentity)
		switch {
		case !assigned:
			return false, notAssigned(s, p, ack.WorkloadIdentity), ""
		case shadow && stateRank[ack.State] > stateRank[Validated] && ack.State != Rejected && ack.State != Stale:
			return false, fmt.Sprintf("shadow: %s validates generation %d in shadow stage %q and must not apply it before a stage that applies reaches it; report VALIDATED",
				ack.WorkloadIdentity, rel.Generation, rel.Stages[i].Name), ""
		}
		stage = i
	}
	// The instance's earlier counted reports of this registration: a later
	// apply sequence makes this one out of order; at the same sequence, a
	// counted failure stands, the same report is a duplicate, and states
	// only go forward.
	var applied, failure, same, later *Ack
	for i := range prev {
		q := &prev[i]
		if !q.Counted || q.BootID != ack.BootID || q.MembershipEpoch != ack.MembershipEpoch {
			continue // another boot or registration: it started over
		}
		switch {
		case q.ApplySequence > ack.ApplySequence:
			return false, fmt.Sprintf("out of order: apply sequence %d after %d", ack.ApplySequence, q.ApplySequence), ""
		case q.ApplySequence < ack.ApplySequence:
			continue
		case failed(*q):
			if failure == nil || sameReport(*q, ack) {
				failure = q
			}
		case sameReport(*q, ack):
			same = q
		case stateRank[ack.State] < stateRank[q.State]:
			later = q
		case q.State == Applied && applied == nil:
			applied = q
		}
	}
	switch {
	case failure != nil && sameReport(*failure, ack):
		return false, fmt.Sprintf("duplicate: %s at apply sequence %d was already counted", ack.State, ack.ApplySequence), ""
	case failure != nil:
		return false, fmt.Sprintf("a failure stands: %s at apply sequence %d was counted (%s); apply again, with a higher apply sequence, to report anew",
			displayState(*failure, true, false), failure.ApplySequence, failureOf(*failure)), ""
	case later != nil:
		return false, fmt.Sprintf("out of order: %s after %s at apply sequence %d", ack.State, later.State, ack.ApplySequence), ""
	case same != nil:
		return false, fmt.Sprintf("duplicate: %s at apply sequence %d was already counted", ack.State, ack.ApplySequence), ""
	}
	if ack.State != HealthyAcked || !ack.HealthOK {
		return true, "", "" // a failure counts at once: it needs no waiting
	}
	if why := healthWindowShort(rel, ack, applied); why != "" {
		return false, why, ""
	}
	if stage >= 0 && rel.Stages[stage].Budget != nil {
		budget := rel.Stages[stage].Budget
		if ack.Health == nil {
			return false, fmt.Sprintf("stage %q has a health budget (%s): report the error rate and p99 latency measured over the health window", rel.Stages[stage].Name, budget), ""
		}
		if over := budget.Check(ack.Health.ErrorRate, ack.Health.P99); over != "" {
			return true, "", fmt.Sprintf("stage %q: %s", rel.Stages[stage].Name, over)
		}
	}
	return true, "", ""
}

// healthWindowShort says why a healthy HEALTHY_ACKED came before its
// release's health window passed, or "" when it did not. Two measures must
// both reach the window: the instance's own (Held, one process's
// monotonic clock), and the server's (from the arrival of the same
// apply's APPLIED, applied, to this report's). The server's may span two
// replicas' wall clocks, which can disagree or step; the instance's cannot
// be shortened by either, and the server's keeps a client that misreports
// its hold from passing on its word alone. A wrong clock can then only
// delay a report, never count it early.
func healthWindowShort(rel release.Release, ack Ack, applied *Ack) string {
	window := rel.HealthWindow
	switch {
	case window <= 0:
		return ""
	case applied == nil:
		return fmt.Sprintf("health window: no APPLIED ACK of boot %s at apply sequence %d came first; report APPLIED, then HEALTHY_ACKED after %s",
			ack.BootID, ack.ApplySequence, window)
	case ack.Held < window:
		return fmt.Sprintf("health window: the instance held apply sequence %d for %s by its own clock (held), but the release's health window is %s; "+
			"report again when it has passed", ack.ApplySequence, ack.Held.Round(time.Millisecond), window)
	}
	if held := ack.ReceivedAt.Sub(applied.ReceivedAt); held < window {
		return fmt.Sprintf("health window: healthy %s after APPLIED, but the release's health window is %s; report again when it has passed",
			held.Round(time.Millisecond), window)
	}
	return ""
}

// notAssigned says why a candidate is not assigned to id yet.
func notAssigned(s snapshot, p plan, id string) string {
	rel := s.rel
	i, applies := p.applies(id)
	j, shadows := p.shadows(id)
	switch {
	case !applies && !shadows:
		return fmt.Sprintf("not assigned: no stage of generation %d takes %s before promotion (outside every selector, or not in a fraction stage's cohort)", rel.Generation, id)
	case shadows:
		i = j // a shadow stage always comes before the stage that applies
	}
	return fmt.Sprintf("not assigned: %s gets generation %d through stage %q, which the rollout has not reached (stage %q has not passed)",
		id, rel.Generation, rel.Stages[i].Name, rel.Stages[len(s.progress.Passed)].Name)
}

// reportedInShadow reports whether a counted ACK of id was reported
// against a shadow assignment: its stage is a shadow stage, so it counts
// there and nowhere else.
func reportedInShadow(s snapshot, p plan, id string) bool {
	if s.rel.Generation == s.ptr.Generation {
		return false // promoted: every member runs it
	}
	_, shadow, _ := p.assignedBy(s.progress, id)
	return shadow
}

// sameReport reports whether two ACKs of one apply say the same thing.
func sameReport(a, b Ack) bool {
	return a.State == b.State && a.HealthOK == b.HealthOK && (a.Health == nil) == (b.Health == nil) &&
		(a.Health == nil || *a.Health == *b.Health)
}

// failureOf says what a counted failure was.
func failureOf(a Ack) string {
	switch {
	case a.State == Rejected && a.Reason != "":
		return a.Reason
	case a.State == Rejected:
		return "rejected"
	case a.Breach != "":
		return a.Breach
	}
	return "health_ok false"
}
