package rollout

import "github.com/pawlcfg/pawl/server/internal/quorum"

// StageStates counts the stages of the rollouts in flight by state, from
// the views: each config's newest release while the pointer has not
// reached it. A stage is "passed" once it passed, "failed" once its
// evaluation failed, "waiting" while it is reached and neither, and
// "pending" before the stages ahead of it passed; every stage of a
// stopped rollout is "stopped". It only reads, under the views' read
// lock, for metrics.
func (r *Rollouts) StageStates() map[string]int {
	now := r.now()
	v := r.views
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := map[string]int{}
	for _, cv := range v.configs {
		t := cv.newest
		if t == nil || t.rel.Generation != cv.head || cv.ptr.promoted(cv.head) {
			continue
		}
		if t.stop != nil {
			out["stopped"] += len(t.rel.Stages)
			continue
		}
		evals := t.evaluate(now)
		for i := range t.rel.Stages {
			switch {
			case i < len(t.progress.Passed) || (t.progress.reached(i) && evals[i].Outcome == quorum.Passed):
				out["passed"]++
			case !t.progress.reached(i):
				out["pending"]++
			case evals[i].Outcome == quorum.Failed:
				out["failed"]++
			default:
				out["waiting"]++
			}
		}
	}
	return out
}
