package rollout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"sort"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
)

// Assignment is the generation of one config an instance must run. An
// instance activates only what it is assigned, never the largest
// generation it has seen.
type Assignment struct {
	ConfigID        string
	Generation      int64
	ContentDigest   string
	ValidatorDigest string
	// Stage is empty for the active generation, and names the stage for a
	// canary assignment of a newer, not yet promoted release.
	Stage string
	// Epoch is the config pointer's epoch, which every rollback increments.
	Epoch int64
}

// Assignments computes what the instance must run, config by config: the
// newest release's generation if it was never promoted and the instance is
// a member of a stage that has been reached (every earlier stage passed),
// else the active generation. Configs with neither are left out.
func (r *Rollouts) Assignments(ctx context.Context, identity string) ([]Assignment, error) {
	configs, err := r.releases.Configs(ctx)
	if err != nil {
		return nil, err
	}
	var out []Assignment
	for _, config := range configs {
		a, ok, err := r.assignment(ctx, config, identity)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, a)
		}
	}
	return out, nil
}

func (r *Rollouts) assignment(ctx context.Context, config, identity string) (Assignment, bool, error) {
	ptr, err := r.Pointer(ctx, config)
	if err != nil {
		return Assignment{}, false, err
	}
	latest, err := r.releases.Latest(ctx, config)
	if err != nil {
		return Assignment{}, false, err
	}
	if latest.Generation > max(ptr.Generation, ptr.HighWater) {
		if stage, ok, err := r.canaryStage(ctx, latest, identity); err != nil || ok {
			return assignmentOf(latest, stage, ptr.Epoch), ok, err
		}
	}
	if ptr.Generation == 0 {
		return Assignment{}, false, nil
	}
	active, err := r.releases.Get(ctx, config, ptr.Generation)
	if err != nil {
		return Assignment{}, false, err
	}
	return assignmentOf(active, "", ptr.Epoch), true, nil
}

// canaryStage returns the stage through which the instance receives a
// not-yet-promoted release: the first reached stage that takes it. A stage
// takes the members its selector matches; a fraction stage takes only its
// cohort (see Cohort). A stage is reached when every stage before it
// passed; a failed stage stops the rollout, and after a stop nothing of it
// is offered.
func (r *Rollouts) canaryStage(ctx context.Context, rel release.Release, identity string) (string, bool, error) {
	var member *quorum.Member
	for i := range rel.Membership {
		if rel.Membership[i].ID == identity {
			member = &rel.Membership[i]
		}
	}
	if member == nil {
		return "", false, nil
	}
	status, err := r.Status(ctx, rel.ConfigID, rel.Generation)
	if err != nil || status.Stop != nil {
		return "", false, err
	}
	for i, st := range rel.Stages {
		if instance.Matches(*member, st.Selector) && (st.Policy.Kind != quorum.Fraction || Cohort(rel, i)[identity]) {
			return st.Name, true, nil
		}
		if status.Stages[i].Evaluation.Outcome != quorum.Passed {
			return "", false, nil
		}
	}
	return "", false, nil
}

// Cohort is the members a fraction stage sends the release to: of the
// members its selector matches, the fraction needed (rounded up), chosen by
// a hash of config, generation and identity, so that each release picks its
// own canaries and every server picks the same ones. The others wait for a
// later stage.
func Cohort(rel release.Release, stage int) map[string]bool {
	st := rel.Stages[stage]
	type ranked struct {
		id   string
		rank [sha256.Size]byte
	}
	var matching []ranked
	for _, m := range rel.Membership {
		if instance.Matches(m, st.Selector) {
			matching = append(matching, ranked{m.ID, sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", rel.ConfigID, rel.Generation, m.ID)))})
		}
	}
	sort.Slice(matching, func(i, j int) bool { return bytes.Compare(matching[i].rank[:], matching[j].rank[:]) < 0 })
	n := min(len(matching), quorum.AtLeast(st.Policy.Fraction, len(matching)))
	out := make(map[string]bool, n)
	for _, m := range matching[:n] {
		out[m.id] = true
	}
	return out
}

func assignmentOf(rel release.Release, stage string, epoch int64) Assignment {
	return Assignment{ConfigID: rel.ConfigID, Generation: rel.Generation, ContentDigest: rel.ContentDigest,
		ValidatorDigest: rel.ValidatorDigest, Stage: stage, Epoch: epoch}
}
