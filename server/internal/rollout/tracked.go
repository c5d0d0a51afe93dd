package rollout

import (
	"maps"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
)

// registration is what counts of an instance's registration: the boot and
// membership epoch its ACKs must carry, and the app version it registered
// with, which decides the releases it may run.
type registration struct {
	boot       string
	epoch      int64
	appVersion string
}

// registrationOf is what counts of a registration record.
func registrationOf(rec instance.Record) registration {
	return registration{boot: rec.BootID, epoch: rec.MembershipEpoch, appVersion: rec.AppVersion}
}

// tracked is a release's rollout kept up to date one record at a time:
// its progress, stop record and retirements, the plan of its stages, each
// member's counted ACKs from its current registration, and a quorum tally
// per stage. Adding an ACK costs a few map operations and one move per
// stage that counts the member, and evaluating every stage costs time in
// the number of zones, not of members.
//
// The views keep one for the newest and one for the active release of each
// config; a status of any other release builds one from the store. A
// tracked is not safe for concurrent use: the views guard theirs with
// their lock. Its plan, progress, stop and retired map are replaced, never
// modified, so a reader may keep them after the lock is released.
type tracked struct {
	rel      release.Release
	progress Progress
	stop     *Stop
	retired  map[string]Retirement
	plan     plan
	// countedIn lists, per member, the stages whose quorum counts it.
	countedIn map[string][]int
	tallies   []*quorum.Tally
	// members holds the members with counted ACKs of their current
	// registration.
	members map[string]*memberView
	// arrivals is the arrival nanosecond of each identity's last ACK of
	// the release, counted or not: the next one's key comes after it.
	arrivals map[string]int64
}

// memberView is a member's counted ACKs of its current registration.
type memberView struct {
	acks []Ack // in arrival order
	// latest is its state: the highest apply sequence, and of equal ones
	// the last to arrive.
	latest Ack
}

func newTracked(rel release.Release, progress Progress, stop *Stop, retired map[string]Retirement) *tracked {
	t := &tracked{rel: rel, progress: progress, stop: stop, members: map[string]*memberView{}, arrivals: map[string]int64{}}
	t.replan(retired)
	return t
}

// replan lays the stages over the membership less the retired members, and
// tallies every stage again from the members' states.
func (t *tracked) replan(retired map[string]Retirement) {
	t.retired = retired
	t.plan = newPlan(t.rel, retired)
	t.countedIn = map[string][]int{}
	t.tallies = make([]*quorum.Tally, len(t.rel.Stages))
	for i, st := range t.rel.Stages {
		t.tallies[i] = quorum.NewTally(st.Policy, t.plan.counted[i])
		for _, m := range t.plan.counted[i] {
			t.countedIn[m.ID] = append(t.countedIn[m.ID], i)
		}
	}
	for id, mv := range t.members {
		if _, ok := t.plan.members[id]; !ok {
			delete(t.members, id) // retired: none of its ACKs count any more
			continue
		}
		t.move(id, nil, &mv.latest)
	}
}

// move moves a member's quorum state, in every stage that counts it, from
// what the ACK from says to what the ACK to says (nil: no state).
func (t *tracked) move(id string, from, to *Ack) {
	m := t.plan.members[id]
	for _, i := range t.countedIn[id] {
		shadow := t.rel.Stages[i].Shadow
		t.tallies[i].Move(m, stateOf(from, shadow), stateOf(to, shadow))
	}
}

func stateOf(a *Ack, shadow bool) quorum.State {
	if a == nil {
		return quorum.Pending
	}
	return quorumState(*a, shadow)
}

// addAck takes a stored ACK of the release, in the order they were stored.
// It counts only when it was counted, comes from a member, and from reg,
// the member's current registration.
func (t *tracked) addAck(a Ack, reg registration, registered bool) {
	t.arrivals[a.WorkloadIdentity] = max(t.arrivals[a.WorkloadIdentity], a.arrival)
	if _, member := t.plan.members[a.WorkloadIdentity]; !a.Counted || !member || !registered ||
		reg.boot != a.BootID || reg.epoch != a.MembershipEpoch {
		return
	}
	mv := t.members[a.WorkloadIdentity]
	if mv == nil {
		mv = &memberView{latest: a}
		t.members[a.WorkloadIdentity] = mv
		mv.acks = append(mv.acks, a)
		t.move(a.WorkloadIdentity, nil, &mv.latest)
		return
	}
	mv.acks = append(mv.acks, a)
	if a.ApplySequence >= mv.latest.ApplySequence {
		old := mv.latest
		mv.latest = a
		t.move(a.WorkloadIdentity, &old, &mv.latest)
	}
}

// reregistered forgets what a member reported: it registered again, and
// its earlier registration's ACKs no longer count.
func (t *tracked) reregistered(id string) {
	if mv := t.members[id]; mv != nil {
		t.move(id, &mv.latest, nil)
		delete(t.members, id)
	}
}

// retire takes a retirement of a member.
func (t *tracked) retire(rt Retirement) {
	retired := maps.Clone(t.retired)
	retired[rt.WorkloadIdentity] = rt
	t.replan(retired)
}

// evaluate is every stage's verdict now. A stage still waiting at the
// release's deadline has failed; its tallies stay as the evidence.
func (t *tracked) evaluate(now time.Time) []quorum.Evaluation {
	deadline := t.rel.CreatedAt.Add(t.rel.Deadline)
	out := make([]quorum.Evaluation, len(t.tallies))
	for i, tally := range t.tallies {
		out[i] = tally.Evaluate()
		if out[i].Outcome == quorum.Waiting && now.After(deadline) {
			out[i].Outcome = quorum.Failed
			out[i].Reason = "the deadline passed at " + deadline.Format(time.RFC3339) + " while " + out[i].Reason
		}
	}
	return out
}

// prior is a copy of a member's counted ACKs of its current registration.
func (t *tracked) prior(id string) []Ack {
	if mv := t.members[id]; mv != nil {
		return append([]Ack(nil), mv.acks...)
	}
	return nil
}

// latest is each member's state, for status: its latest counted ACK.
func (t *tracked) latest() map[string]Ack {
	out := make(map[string]Ack, len(t.members))
	for id, mv := range t.members {
		out[id] = mv.latest
	}
	return out
}

// stageResults is every stage's evaluation now, with its members counted
// by display state (stale: the members whose assignment moved past the
// release).
func (t *tracked) stageResults(now time.Time, stale map[string]bool) []StageResult {
	evals := t.evaluate(now)
	out := make([]StageResult, 0, len(t.rel.Stages))
	for i, st := range t.rel.Stages {
		res := StageResult{Name: st.Name, Shadow: st.Shadow, Reached: t.progress.reached(i), Retired: t.plan.retired[i],
			Evaluation: evals[i], States: map[string]int{}, ZoneStates: map[string]map[string]int{}}
		if i < len(t.progress.Passed) {
			res.PassedAt = t.progress.Passed[i].Time
		}
		for _, m := range t.plan.counted[i] {
			mv := t.members[m.ID]
			var a Ack
			if mv != nil {
				a = mv.latest
			}
			state := displayState(a, mv != nil, stale[m.ID])
			res.States[state]++
			if res.ZoneStates[m.Zone] == nil {
				res.ZoneStates[m.Zone] = map[string]int{}
			}
			res.ZoneStates[m.Zone][state]++
		}
		out = append(out, res)
	}
	return out
}
