package rollout

import (
	"maps"
	"slices"
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
	// credentialed: it was made with an instance credential.
	credentialed bool
}

// registrationOf is what counts of a registration record.
func registrationOf(rec instance.Record) registration {
	return registration{boot: rec.BootID, epoch: rec.MembershipEpoch, appVersion: rec.AppVersion, credentialed: rec.InstanceCredential}
}

// tracked is a release's rollout kept up to date one record at a time:
// its progress, stop record and retirements, the plan of its stages, each
// member's counted ACKs from its current registration, and a quorum tally
// per stage. Adding an ACK costs a few map operations and one move in each
// of the (at most two) stages that count the member, and evaluating every
// stage costs time in the number of zones, not of members.
//
// The views keep one for the newest and one for the active release of each
// config, and one, untallied, for the release the last promotion
// superseded until a newer one is cut; a status of any other release
// builds one from the store. A tracked is not safe for concurrent use:
// the views guard theirs with their lock. Its plan, progress, stop and retired map are replaced, never
// modified, so a reader may keep them after the lock is released.
type tracked struct {
	rel      release.Release
	progress Progress
	stop     *Stop
	retired  map[string]Retirement
	plan     plan
	tallies  []*quorum.Tally
	// members holds the members with counted ACKs of their current
	// registration.
	members map[string]*memberView
	// arrivals is the arrival nanosecond of each identity's last ACK of
	// the release, counted or not: the next one's key comes after it.
	arrivals map[string]int64
	// stored is each identity's stored ACKs of the release, counted or
	// not, in arrival order: at most MaxAcksPerInstance of them.
	stored map[string][]storedAck
	// untallied says the release's rollout is over and the views let go
	// of its members' counted ACKs and its tallies (letGoOfTallies): a
	// report of it is late and counts nowhere, and judging one needs only
	// the plan, the stored ACKs and the arrivals.
	untallied bool
}

// letGoOfTallies makes t untallied. The views hold the write lock.
func (t *tracked) letGoOfTallies() {
	t.untallied = true
	t.members, t.tallies = map[string]*memberView{}, nil
}

// storedAck is what the bound on an instance's stored ACKs needs to know
// of one (its key's arrival, and whether it counted), and what finds the
// ACK that a report sent again names (its boot and report ID; 0: none).
type storedAck struct {
	arrival  int64
	counted  bool
	reportID uint64
	boot     string
}

// storedOf is what the views keep of a stored ACK.
func storedOf(a Ack) storedAck {
	s := storedAck{arrival: a.arrival, counted: a.Counted, reportID: a.ReportID}
	if a.ReportID != 0 {
		s.boot = a.BootID // only a report with an ID is looked up by it
	}
	return s
}

// memberView is a member's counted ACKs of its current registration.
type memberView struct {
	acks []Ack // in arrival order
	// latest is its state: the highest apply sequence, and of equal ones
	// the last to arrive. applying and validating are the same, of its
	// reports against the stage that applies (or, once promoted, of the
	// release it runs) and of those against its shadow stage. Each is an
	// index into acks (-1: none), not a pointer to a copy: a view of a
	// release that a fleet ACKs holds one memberView per member.
	latest, applying, validating int
}

func newMemberView() *memberView { return &memberView{latest: -1, applying: -1, validating: -1} }

// at is ACK i (nil: -1, none).
func (mv *memberView) at(i int) *Ack {
	if i < 0 {
		return nil
	}
	return &mv.acks[i]
}

// take makes a the member's latest report, and the latest of its kind,
// unless a later apply sequence came first.
func (mv *memberView) take(a Ack) {
	mv.acks = append(mv.acks, a)
	k := len(mv.acks) - 1
	later := func(cur int) bool { return cur < 0 || a.ApplySequence >= mv.acks[cur].ApplySequence }
	if later(mv.latest) {
		mv.latest = k
	}
	switch {
	case a.Shadow && later(mv.validating):
		mv.validating = k
	case !a.Shadow && later(mv.applying):
		mv.applying = k
	}
}

// stageRole is what a stage is to a member it counts.
type stageRole int

const (
	// roleApplies: the stage assigns the member the release to apply.
	roleApplies stageRole = iota
	// roleValidatesFirst: a shadow stage before the stage that applies.
	roleValidatesFirst
	// roleValidatesOnly: a shadow stage, and no stage applies for the member:
	// it gets the release at promotion, and its reports of running it
	// after that count here, the only stage that shows its health.
	roleValidatesOnly
)

// roleOf is what stage i is to member id.
func (p plan) roleOf(i int, id string) stageRole {
	_, applying := p.applies(id)
	switch {
	case !p.rel.Stages[i].Shadow:
		return roleApplies
	case applying:
		return roleValidatesFirst
	}
	return roleValidatesOnly
}

// evidence is the report of a member's that a stage's quorum judges it
// by: for the stage that applies, its latest report since that stage
// assigned it the release (a shadow VALIDATED says nothing about applying
// it); for a shadow stage before it, its latest shadow report, or, when it
// has none (it restarted once the stage that applies reached it), its
// latest report of applying the release, which validated it on the way;
// for a shadow stage that is its only stage, its latest report.
func (mv *memberView) evidence(role stageRole) (Ack, bool) {
	var a *Ack
	switch {
	case mv == nil:
	case role == roleValidatesOnly:
		a = mv.at(mv.latest)
	case role == roleValidatesFirst && mv.validating >= 0:
		a = mv.at(mv.validating)
	default:
		a = mv.at(mv.applying)
	}
	if a == nil {
		return Ack{}, false
	}
	return *a, true
}

// stateIn is what a member's reports mean to the quorum of a stage that
// counts it. A shadow stage before the stage that applies never takes a
// failure from it: that counts there, where it was reported.
func (mv *memberView) stateIn(role stageRole) quorum.State {
	a, ok := mv.evidence(role)
	switch {
	case !ok:
		return quorum.Pending
	case role == roleValidatesFirst && !a.Shadow && failed(a):
		return quorum.Pending
	}
	return quorumState(a, role != roleApplies)
}

func newTracked(rel release.Release, progress Progress, stop *Stop, retired map[string]Retirement) *tracked {
	t := &tracked{rel: rel, progress: progress, stop: stop, members: map[string]*memberView{}, arrivals: map[string]int64{},
		stored: map[string][]storedAck{}}
	t.replan(retired)
	return t
}

// cohortPolicy is the policy a stage's quorum applies to the members it
// counts. A fraction stage counts only its cohort, which the fraction
// already sized: every member of it must be healthy (within max-rejected),
// or a 1% canary of 10,000 instances would pass on one of its 100.
func cohortPolicy(p quorum.Policy) quorum.Policy {
	if p.Kind == quorum.Fraction {
		p.Kind, p.Fraction = quorum.All, 0
	}
	return p
}

// replan lays the stages over the membership less the retired members, and
// tallies every stage again from the members' states (an untallied
// release, none).
func (t *tracked) replan(retired map[string]Retirement) {
	t.retired = retired
	t.plan = newPlan(t.rel, retired)
	if t.untallied {
		return
	}
	t.tallies = make([]*quorum.Tally, len(t.rel.Stages))
	for i, st := range t.rel.Stages {
		t.tallies[i] = quorum.NewTally(cohortPolicy(st.Policy), t.plan.counted(i))
	}
	for id := range t.members {
		if _, ok := t.plan.position(id); !ok {
			delete(t.members, id) // retired: none of its ACKs count any more
			continue
		}
		t.moveFrom(id, [2]quorum.State{}) // the tallies are new: every member pending
	}
}

// states is what member id's reports mean now to each stage that counts
// it (plan.stagesOf): a member has at most a shadow stage and the stage
// that applies.
func (t *tracked) states(id string) [2]quorum.State {
	var out [2]quorum.State
	mv := t.members[id]
	for k, i := range t.plan.stagesOf(id) {
		out[k] = mv.stateIn(t.plan.roleOf(i, id))
	}
	return out
}

// moveFrom moves member id, in the tally of every stage that counts it,
// from the states from to what its reports say now.
func (t *tracked) moveFrom(id string, from [2]quorum.State) {
	m, _ := t.plan.member(id)
	to := t.states(id)
	for k, i := range t.plan.stagesOf(id) {
		t.tallies[i].Move(m, from[k], to[k])
	}
}

// addAck takes a stored ACK of the release, in the order they were stored.
// It counts only when it was counted, comes from a member, and from reg,
// the member's current registration.
func (t *tracked) addAck(a Ack, reg registration, registered bool) {
	t.arrivals[a.WorkloadIdentity] = max(t.arrivals[a.WorkloadIdentity], a.arrival)
	t.stored[a.WorkloadIdentity] = append(t.stored[a.WorkloadIdentity], storedOf(a))
	if _, member := t.plan.position(a.WorkloadIdentity); !a.Counted || t.untallied || !member || !registered ||
		reg.boot != a.BootID || reg.epoch != a.MembershipEpoch {
		return
	}
	from := t.states(a.WorkloadIdentity)
	mv := t.members[a.WorkloadIdentity]
	if mv == nil {
		mv = newMemberView()
		t.members[a.WorkloadIdentity] = mv
	}
	mv.take(a)
	t.moveFrom(a.WorkloadIdentity, from)
}

// removeAck forgets the ACK of id that arrived at arrival: it was deleted
// (an instance's newer ACKs replaced it, see MaxAcksPerInstance). When it
// counted, the member's state is what its remaining counted ACKs say, as
// if it had never been stored.
func (t *tracked) removeAck(id string, arrival int64) {
	t.stored[id] = slices.DeleteFunc(t.stored[id], func(s storedAck) bool { return s.arrival == arrival })
	if len(t.stored[id]) == 0 {
		delete(t.stored, id)
	}
	mv := t.members[id]
	if mv == nil {
		return
	}
	i := slices.IndexFunc(mv.acks, func(a Ack) bool { return a.arrival == arrival })
	if i < 0 {
		return
	}
	from := t.states(id)
	rest := slices.Delete(slices.Clone(mv.acks), i, i+1)
	if len(rest) == 0 {
		delete(t.members, id)
	} else {
		nv := newMemberView()
		for _, a := range rest {
			nv.take(a)
		}
		t.members[id] = nv
	}
	t.moveFrom(id, from)
}

// reregistered forgets what a member reported: it registered again, and
// its earlier registration's ACKs no longer count.
func (t *tracked) reregistered(id string) {
	if _, ok := t.members[id]; ok {
		from := t.states(id)
		delete(t.members, id)
		t.moveFrom(id, from)
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

// prior is a member's counted ACKs of its current registration, for
// reading only: the view's own slice, cut to its length and capacity, not
// a copy (a judgement read a copy of some 7 ACKs of 400 bytes for every
// ACK). It stays as it is after the lock is let go: the views only append
// to a member's ACKs, beyond the cut, and replace the slice when one is
// removed (removeAck), never writing an element in place.
func (t *tracked) prior(id string) []Ack {
	if mv := t.members[id]; mv != nil {
		return mv.acks[:len(mv.acks):len(mv.acks)]
	}
	return nil
}

// latest is each member's state, for status: its latest counted ACK.
func (t *tracked) latest() map[string]Ack {
	out := make(map[string]Ack, len(t.members))
	for id, mv := range t.members {
		out[id] = mv.acks[mv.latest]
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
			Evaluation: evals[i], States: map[string]int{}, ZoneStates: map[string]map[string]int{}, RoleStates: map[string]map[string]int{}}
		if i < len(t.progress.Passed) {
			res.PassedAt = t.progress.Passed[i].Time
		}
		for _, m := range t.plan.counted(i) {
			a, ok := t.members[m.ID].evidence(t.plan.roleOf(i, m.ID))
			state := displayState(a, ok, stale[m.ID])
			res.States[state]++
			if res.ZoneStates[m.Zone] == nil {
				res.ZoneStates[m.Zone] = map[string]int{}
			}
			res.ZoneStates[m.Zone][state]++
			if res.RoleStates[m.Role] == nil {
				res.RoleStates[m.Role] = map[string]int{}
			}
			res.RoleStates[m.Role][state]++
		}
		out = append(out, res)
	}
	return out
}
