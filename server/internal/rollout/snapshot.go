package rollout

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// Progress is how far a release's rollout got: the stages that passed, in
// plan order, each with the evidence of the moment it passed. Stage i is
// reached (its instances are assigned the release) once the i stages
// before it passed. Progress only grows, so an assignment once made is
// never taken back while the rollout goes on.
type Progress struct {
	ConfigID   string      `json:"config_id"`
	Generation int64       `json:"generation"`
	Passed     []StagePass `json:"passed"`
	// Revision is the store revision of the record (0: no stage passed).
	Revision int64 `json:"-"`
}

// StagePass records that a stage passed.
type StagePass struct {
	Stage    string            `json:"stage"`
	Time     time.Time         `json:"time"`
	Evidence quorum.Evaluation `json:"evidence"`
}

// reached reports whether stage i is reached.
func (p Progress) reached(i int) bool { return i <= len(p.Passed) }

// Retirement records that a member left a release's frozen membership: the
// only way its denominator shrinks.
type Retirement struct {
	ConfigID         string    `json:"config_id"`
	Generation       int64     `json:"generation"`
	WorkloadIdentity string    `json:"workload_identity"`
	Reason           string    `json:"reason"`
	Actor            string    `json:"actor"`
	Time             time.Time `json:"time"`
	// MembershipGeneration is the membership generation the retirement
	// made: the frozen membership is 1, and each retirement adds one.
	MembershipGeneration int64 `json:"membership_generation,omitempty"`
	// Revision is the store revision of the record.
	Revision int64 `json:"-"`
}

// membershipGeneration is the generation of a frozen membership after
// the retirements: 1, plus one per retirement.
func membershipGeneration(retired map[string]Retirement) int64 { return 1 + int64(len(retired)) }

// retirementsInOrder are the retirements in the order they made the
// membership's generations.
func retirementsInOrder(retired map[string]Retirement) []Retirement {
	out := make([]Retirement, 0, len(retired))
	for _, rt := range retired {
		out = append(out, rt)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MembershipGeneration != out[j].MembershipGeneration {
			return out[i].MembershipGeneration < out[j].MembershipGeneration
		}
		return out[i].WorkloadIdentity < out[j].WorkloadIdentity
	})
	return out
}

// snapshot is a release's rollout as of one store revision: what a
// judgement, an evaluation or a promotion rests on. Every field is read at
// rev, so a write conditioned on "nothing changed since rev" commits only
// while the snapshot still holds.
type snapshot struct {
	rev      int64
	rel      release.Release
	latest   int64 // the config's newest generation
	ptr      Pointer
	stop     *Stop
	progress Progress
	retired  map[string]Retirement
	now      time.Time
}

// candidate reports whether the release's rollout goes on: it is the
// config's newest release, was never promoted or passed over, and did not
// stop.
func (s snapshot) candidate() bool {
	return s.rel.Generation == s.latest && !s.ptr.promoted(s.rel.Generation) && s.stop == nil
}

// over says why the release's rollout is over and its evidence frozen, or
// "" while it goes on or the release is active.
func (s snapshot) over() string {
	g := s.rel.Generation
	switch {
	case g == s.ptr.Generation:
		return ""
	case s.ptr.promoted(g):
		return fmt.Sprintf("generation %d is no longer active (active generation %d, epoch %d); its evidence is frozen", g, s.ptr.Generation, s.ptr.Epoch)
	case s.stop != nil:
		return fmt.Sprintf("the rollout stopped at %s (%s); its evidence is frozen", s.stop.Time.Format(time.RFC3339), s.stop.Reason)
	case g < s.latest:
		return fmt.Sprintf("generation %d was superseded by generation %d before it was promoted; its evidence is frozen", g, s.latest)
	}
	return ""
}

// load reads the release and the records that follow it at rev.
func (r *Rollouts) load(ctx context.Context, config string, gen, rev int64) (snapshot, error) {
	rel, err := r.releases.Get(ctx, config, gen)
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{rev: rev, rel: rel, now: r.now()}
	if s.latest, err = r.releases.HeadAt(ctx, config, rev); err != nil {
		return snapshot{}, err
	}
	s.latest = max(s.latest, gen) // created after rev: it exists all the same
	if s.ptr, err = r.pointerAt(ctx, config, rev); err != nil {
		return snapshot{}, err
	}
	if s.stop, err = r.stopAt(ctx, config, gen, rev); err != nil {
		return snapshot{}, err
	}
	if s.progress, err = r.progressAt(ctx, config, gen, rev); err != nil {
		return snapshot{}, err
	}
	if s.retired, err = r.retiredAt(ctx, config, gen, rev); err != nil {
		return snapshot{}, err
	}
	return s, nil
}

func (r *Rollouts) stopAt(ctx context.Context, config string, gen, rev int64) (*Stop, error) {
	var s Stop
	kv, ok, err := getAt(ctx, r.store, records.Stop(config, gen), rev, &s)
	if err != nil || !ok {
		return nil, err
	}
	s.Revision = kv.ModRevision
	return &s, nil
}

func (r *Rollouts) progressAt(ctx context.Context, config string, gen, rev int64) (Progress, error) {
	p := Progress{ConfigID: config, Generation: gen}
	kv, ok, err := getAt(ctx, r.store, records.Progress(config, gen), rev, &p)
	if err != nil || !ok {
		return Progress{ConfigID: config, Generation: gen}, err
	}
	p.Revision = kv.ModRevision
	return p, nil
}

func (r *Rollouts) retiredAt(ctx context.Context, config string, gen, rev int64) (map[string]Retirement, error) {
	out := map[string]Retirement{}
	_, err := store.EachAt(ctx, r.store, records.RetiredOf(config, gen), rev, func(kv store.KeyValue) error {
		var rt Retirement
		if err := records.Decode(kv, &rt); err != nil {
			return err
		}
		rt.Revision = kv.ModRevision
		out[rt.WorkloadIdentity] = rt
		return nil
	})
	return out, err
}

// acksAt reads a generation's ACKs at rev, of one identity or (identity "")
// of every instance, in arrival order per instance.
func (r *Rollouts) acksAt(ctx context.Context, config string, gen int64, identity string, rev int64) ([]Ack, error) {
	prefix := records.Acks(config, gen)
	if identity != "" {
		prefix += identity + "/"
	}
	var out []Ack
	_, err := store.EachAt(ctx, r.store, prefix, rev, func(kv store.KeyValue) error {
		a, err := decodeAck(kv)
		if err != nil {
			return err
		}
		// Identities may hold '/': the prefix of "a" also covers "a/b".
		if identity == "" || a.WorkloadIdentity == identity {
			out = append(out, a)
		}
		return nil
	})
	return out, err
}

// decodeAck reads a stored ACK with its arrival.
func decodeAck(kv store.KeyValue) (Ack, error) {
	var a Ack
	if err := records.Decode(kv, &a); err != nil {
		return Ack{}, err
	}
	arrival, err := records.AckArrival(kv.Key)
	if err != nil {
		return Ack{}, err
	}
	a.arrival = arrival
	return a, nil
}

// Acks returns every ACK of a generation, counted or not, in arrival order
// per instance.
func (r *Rollouts) Acks(ctx context.Context, config string, gen int64) ([]Ack, error) {
	return r.acksAt(ctx, config, gen, "", 0)
}

// viewsSnapshot is everything the views hold, read at one revision.
type viewsSnapshot struct {
	configs map[string]*configView
	regs    map[string]registration
	applied map[string]map[string]applyInfo
}

// readViews reads the views' state at rev: every registration and applied
// record, and each config's pointer, head, and newest and active releases
// with their ACKs.
func (r *Rollouts) readViews(ctx context.Context, rev int64) (viewsSnapshot, error) {
	snap := viewsSnapshot{configs: map[string]*configView{}, regs: map[string]registration{}, applied: map[string]map[string]applyInfo{}}
	recs, err := r.registry.Registrations(ctx, rev)
	if err != nil {
		return viewsSnapshot{}, err
	}
	for id, rec := range recs {
		snap.regs[id] = registrationOf(rec)
	}
	_, err = store.EachAt(ctx, r.store, records.AppliedPrefix, rev, func(kv store.KeyValue) error {
		var rec AppliedRecord
		if err := records.Decode(kv, &rec); err != nil {
			return err
		}
		if snap.applied[rec.ConfigID] == nil {
			snap.applied[rec.ConfigID] = map[string]applyInfo{}
		}
		snap.applied[rec.ConfigID][rec.WorkloadIdentity] = applyInfoOf(rec, kv.ModRevision)
		return nil
	})
	if err != nil {
		return viewsSnapshot{}, err
	}
	var configs []string
	_, err = store.EachAt(ctx, r.store, records.IndexPrefix, rev, func(kv store.KeyValue) error {
		configs = append(configs, strings.TrimPrefix(kv.Key, records.IndexPrefix))
		return nil
	})
	if err != nil {
		return viewsSnapshot{}, err
	}
	regOf := func(id string) (registration, bool) { reg, ok := snap.regs[id]; return reg, ok }
	for _, config := range configs {
		cv := &configView{}
		if cv.ptr, err = r.pointerAt(ctx, config, rev); err != nil {
			return viewsSnapshot{}, err
		}
		if cv.head, err = r.releases.HeadAt(ctx, config, rev); err != nil {
			return viewsSnapshot{}, err
		}
		if cv.head > 0 {
			if cv.newest, err = r.loadTrackedWith(ctx, config, cv.head, rev, regOf); err != nil {
				return viewsSnapshot{}, err
			}
		}
		switch {
		case cv.ptr.Generation == cv.head:
			cv.active = cv.newest
		case cv.ptr.Generation > 0:
			if cv.active, err = r.loadTrackedWith(ctx, config, cv.ptr.Generation, rev, regOf); err != nil {
				return viewsSnapshot{}, err
			}
		}
		snap.configs[config] = cv
	}
	return snap, nil
}

// loadTracked reads generation gen of config and its rollout at rev, with
// the registrations the views hold: the views' writer calls it for a
// release that becomes the newest or the active one.
func (r *Rollouts) loadTracked(ctx context.Context, config string, gen, rev int64) (*tracked, error) {
	v := r.views
	return r.loadTrackedWith(ctx, config, gen, rev, func(id string) (registration, bool) {
		// The writer's own goroutine: the views' maps do not change under it.
		reg, ok := v.regs[id]
		return reg, ok
	})
}

// loadTrackedWith reads generation gen of config and its rollout at rev:
// the release, its progress, stop record and retirements, and every ACK,
// counted against the registrations regOf gives.
func (r *Rollouts) loadTrackedWith(ctx context.Context, config string, gen, rev int64, regOf func(string) (registration, bool)) (*tracked, error) {
	s, err := r.load(ctx, config, gen, rev)
	if err != nil {
		return nil, err
	}
	t := newTracked(s.rel, s.progress, s.stop, s.retired)
	acks, err := r.acksAt(ctx, config, gen, "", rev)
	if err != nil {
		return nil, err
	}
	for _, a := range acks {
		reg, ok := regOf(a.WorkloadIdentity)
		t.addAck(a, reg, ok)
	}
	return t, nil
}

// trackedAt builds the tracked rollout of any generation from the store at
// rev: what status reads of a release the views do not keep.
func (r *Rollouts) trackedAt(ctx context.Context, s snapshot) (*tracked, error) {
	recs, err := r.registry.Registrations(ctx, s.rev)
	if err != nil {
		return nil, err
	}
	t := newTracked(s.rel, s.progress, s.stop, s.retired)
	acks, err := r.acksAt(ctx, s.rel.ConfigID, s.rel.Generation, "", s.rev)
	if err != nil {
		return nil, err
	}
	for _, a := range acks {
		rec, ok := recs[a.WorkloadIdentity]
		t.addAck(a, registrationOf(rec), ok)
	}
	return t, nil
}

func decodeRegistration(kv store.KeyValue) (registration, error) {
	rec, err := instance.DecodeRegistration(kv)
	if err != nil {
		return registration{}, err
	}
	return registrationOf(rec), nil
}

// applyInfoOf is what judging needs of an applied record stored at
// revision rev.
func applyInfoOf(rec AppliedRecord, rev int64) applyInfo {
	return applyInfo{gen: rec.Generation, contentDigest: rec.ContentDigest, boot: rec.BootID, epoch: rec.MembershipEpoch, seq: rec.ApplySequence, rev: rev}
}
