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

// StageResult is one stage's evaluation.
type StageResult struct {
	Name       string
	Evaluation quorum.Evaluation
	// States counts the stage's members by their latest counted state
	// ("NO_ACK" for none), overall and per zone.
	States     map[string]int
	ZoneStates map[string]map[string]int
}

// Stop is the record of a stopped rollout: the stage that failed (or the
// operator who stopped it), why, and every stage's tallies at that moment.
// It is written once and never changed; after it, nothing of the release is
// offered to instances, ACKs no longer count, and Promote refuses it.
type Stop struct {
	ConfigID   string              `json:"config_id"`
	Generation int64               `json:"generation"`
	Stage      string              `json:"stage,omitempty"`
	Reason     string              `json:"reason"`
	Manual     bool                `json:"manual"`
	Actor      string              `json:"actor,omitempty"`
	Time       time.Time           `json:"time"`
	Evidence   []quorum.Evaluation `json:"evidence"`
	StageNames []string            `json:"stage_names"`
	// Revision is the store revision of the record.
	Revision int64 `json:"-"`
}

// Status is a release's rollout as it stands.
type Status struct {
	Release release.Release
	// Stages are evaluated now, from the ACKs that counted.
	Stages []StageResult
	// Acks are every ACK of the release, counted or not, as evaluated.
	Acks []Ack
	// Pointer is the config's active pointer.
	Pointer Pointer
	// Stop is set once the rollout stopped.
	Stop *Stop
}

// promoted reports whether gen was ever active or passed over by a
// promotion: its rollout is over either way.
func (p Pointer) promoted(gen int64) bool { return gen <= max(p.Generation, p.HighWater) }

// Status evaluates every stage of a release against its frozen membership.
// The first time a stage of a release that was never promoted is found
// failed (its rejections passed the threshold, or the deadline came while
// it waited), the stop record is written with the tallies as evidence.
func (r *Rollouts) Status(ctx context.Context, config string, gen int64) (Status, error) {
	rel, err := r.releases.Get(ctx, config, gen)
	if err != nil {
		return Status{}, err
	}
	ptr, err := r.Pointer(ctx, config)
	if err != nil {
		return Status{}, err
	}
	stop, err := r.GetStop(ctx, config, gen)
	if err != nil {
		return Status{}, err
	}
	acks, err := r.Acks(ctx, config, gen)
	if err != nil {
		return Status{}, err
	}
	stages := r.evaluate(rel, acks)
	st := Status{Release: rel, Stages: stages, Acks: acks, Pointer: ptr, Stop: stop}
	if stop != nil || ptr.promoted(gen) {
		return st, nil
	}
	for _, s := range stages {
		if s.Evaluation.Outcome == quorum.Failed {
			st.Stop, _, err = r.writeStop(ctx, newStop(rel, stages, s.Name, s.Evaluation.Reason, r.now()))
			return st, err
		}
	}
	return st, nil
}

func newStop(rel release.Release, stages []StageResult, stage, reason string, now time.Time) Stop {
	s := Stop{ConfigID: rel.ConfigID, Generation: rel.Generation, Stage: stage, Reason: reason, Time: now.UTC()}
	for _, res := range stages {
		s.Evidence = append(s.Evidence, res.Evaluation)
		s.StageNames = append(s.StageNames, res.Name)
	}
	return s
}

// evaluate tallies every stage of rel from the counted ones of its ACKs.
func (r *Rollouts) evaluate(rel release.Release, acks []Ack) []StageResult {
	latest := latestCounted(acks)
	states := quorumStates(latest)
	var out []StageResult
	for _, st := range rel.Stages {
		res := StageResult{Name: st.Name, States: map[string]int{}, ZoneStates: map[string]map[string]int{}}
		var members []quorum.Member
		for _, m := range rel.Membership {
			if !instance.Matches(m, st.Selector) {
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
	return out
}

func stopKey(config string, gen int64) string {
	return configKey(config, fmt.Sprintf("stops/%020d", gen))
}

// GetStop returns the stop record of a release, or nil while its rollout
// goes on.
func (r *Rollouts) GetStop(ctx context.Context, config string, gen int64) (*Stop, error) {
	kv, _, err := r.store.Get(ctx, stopKey(config, gen), 0)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s Stop
	if err := json.Unmarshal(kv.Value, &s); err != nil {
		return nil, fmt.Errorf("rollout: stop record of %s generation %d: %w", config, gen, err)
	}
	s.Revision = kv.ModRevision
	return &s, nil
}

// writeStop writes s if the release has no stop record yet, and returns
// the record that stands and whether it is s (false: another was first).
func (r *Rollouts) writeStop(ctx context.Context, s Stop) (*Stop, bool, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, false, fmt.Errorf("rollout: encode stop record: %w", err)
	}
	res, err := r.store.Put(ctx, store.Put{Key: stopKey(s.ConfigID, s.Generation), Value: b, ExpectModRevision: new(int64)})
	if errors.Is(err, store.ErrRevisionMismatch) {
		first, err := r.GetStop(ctx, s.ConfigID, s.Generation)
		return first, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("rollout: write stop record: %w", err)
	}
	s.Revision = res.Revision
	return &s, true, nil
}

// StopRollout stops a release's rollout by hand, as an operator does at the
// first sign of trouble: the stop record names the actor and the reason.
// A release that was promoted cannot be stopped (roll back instead), and a
// stopped one cannot be stopped again.
func (r *Rollouts) StopRollout(ctx context.Context, config string, gen int64, reason, actor string) (Stop, error) {
	if reason == "" {
		return Stop{}, fmt.Errorf("%w: a stop needs a reason, for the audit trail", ErrInvalid)
	}
	st, err := r.Status(ctx, config, gen)
	if err != nil {
		return Stop{}, err
	}
	switch {
	case st.Stop != nil:
		return Stop{}, fmt.Errorf("%w: the rollout of %s generation %d already stopped at %s: %s",
			ErrNotReady, config, gen, st.Stop.Time.Format(time.RFC3339), st.Stop.Reason)
	case st.Pointer.promoted(gen):
		return Stop{}, fmt.Errorf("%w: %s generation %d was promoted (active generation %d); roll back instead",
			ErrNotReady, config, gen, st.Pointer.Generation)
	}
	s := newStop(st.Release, st.Stages, "", reason, r.now())
	s.Manual, s.Actor = true, actor
	written, won, err := r.writeStop(ctx, s)
	if err != nil {
		return Stop{}, err
	}
	if !won {
		return Stop{}, fmt.Errorf("%w: the rollout of %s generation %d stopped first, at %s: %s",
			ErrNotReady, config, gen, written.Time.Format(time.RFC3339), written.Reason)
	}
	return *written, nil
}
