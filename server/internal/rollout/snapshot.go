package rollout

import (
	"context"
	"fmt"
	"time"

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
	// Revision is the store revision of the record.
	Revision int64 `json:"-"`
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
		var a Ack
		if err := records.Decode(kv, &a); err != nil {
			return err
		}
		arrival, err := records.AckArrival(kv.Key)
		if err != nil {
			return err
		}
		a.arrival = arrival
		// Identities may hold '/': the prefix of "a" also covers "a/b".
		if identity == "" || a.WorkloadIdentity == identity {
			out = append(out, a)
		}
		return nil
	})
	return out, err
}

// Acks returns every ACK of a generation, counted or not, in arrival order
// per instance.
func (r *Rollouts) Acks(ctx context.Context, config string, gen int64) ([]Ack, error) {
	return r.acksAt(ctx, config, gen, "", 0)
}
