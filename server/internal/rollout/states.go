package rollout

import (
	"context"

	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// The states a release moves through after CANDIDATE, each read off the
// records that follow it (a release record itself never changes).
const (
	// StateStopped: its rollout stopped (a stop record exists).
	StateStopped release.State = "STOPPED"
	// StateActive: the pointer names it.
	StateActive release.State = "ACTIVE"
	// StateSuperseded: a newer release took its place, whether it was
	// active before or never got there.
	StateSuperseded release.State = "SUPERSEDED"
	// StateRolledBack: it was active and a rollback moved the pointer off it.
	StateRolledBack release.State = "ROLLED_BACK"
)

// ReleaseStates returns a function that gives the state of each of a
// config's releases, from one read of its pointer, receipts and stop
// records.
func (r *Rollouts) ReleaseStates(ctx context.Context, config string) (func(release.Release) release.State, error) {
	ptr, err := r.Pointer(ctx, config)
	if err != nil {
		return nil, err
	}
	receipts, err := r.Receipts(ctx, config)
	if err != nil {
		return nil, err
	}
	rolledBack := map[int64]bool{}
	for _, rc := range receipts {
		if rc.Rollback {
			rolledBack[rc.From] = true
		}
	}
	stopped := map[int64]bool{}
	err = store.Each(ctx, r.store, records.Stops(config), func(kv store.KeyValue) error {
		gen, err := records.StopGeneration(config, kv.Key)
		if err != nil {
			return err
		}
		stopped[gen] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	latest, err := r.releases.HeadAt(ctx, config, 0)
	if err != nil {
		return nil, err
	}
	return func(rel release.Release) release.State {
		g := rel.Generation
		switch {
		case g == ptr.Generation:
			return StateActive
		case rolledBack[g]:
			return StateRolledBack
		case stopped[g]:
			return StateStopped
		case ptr.promoted(g) || g < latest:
			return StateSuperseded
		}
		return release.StateCandidate
	}, nil
}
