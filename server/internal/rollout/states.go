package rollout

import (
	"context"
	"fmt"

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
	// StateRevoked: an operator revoked it; it can never be promoted.
	StateRevoked release.State = "REVOKED"
)

// ReleaseStates returns a function that gives the state of each of a
// config's releases, from one read of its pointer, receipts and stop
// records.
func (r *Rollouts) ReleaseStates(ctx context.Context, config string) (func(release.Release) release.State, error) {
	return r.releaseStatesAt(ctx, config, 0)
}

// releaseStatesAt is ReleaseStates as the store was at rev (0: now).
func (r *Rollouts) releaseStatesAt(ctx context.Context, config string, rev int64) (func(release.Release) release.State, error) {
	ptr, err := r.pointerAt(ctx, config, rev)
	if err != nil {
		return nil, err
	}
	receipts, err := r.receiptsAt(ctx, config, rev)
	if err != nil {
		return nil, err
	}
	rolledBack := map[int64]bool{}
	for _, rc := range receipts {
		if rc.Rollback {
			rolledBack[rc.From] = true
		}
	}
	stopped, err := r.generationsUnder(ctx, config, records.Stops(config), rev, records.StopGeneration)
	if err != nil {
		return nil, err
	}
	revoked, err := r.generationsUnder(ctx, config, records.Revocations(config), rev, records.RevokedGeneration)
	if err != nil {
		return nil, err
	}
	latest, err := r.releases.HeadAt(ctx, config, rev)
	if err != nil {
		return nil, err
	}
	return func(rel release.Release) release.State {
		g := rel.Generation
		switch {
		case g == ptr.Generation:
			return StateActive
		case revoked[g]:
			return StateRevoked
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

// generationsUnder returns the generations of the records under prefix at
// rev (0: now), each read off its key by gen.
func (r *Rollouts) generationsUnder(ctx context.Context, config, prefix string, rev int64, gen func(config, key string) (int64, error)) (map[int64]bool, error) {
	out := map[int64]bool{}
	_, err := store.EachAt(ctx, r.store, prefix, rev, func(kv store.KeyValue) error {
		g, err := gen(config, kv.Key)
		if err != nil {
			return err
		}
		out[g] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rollout: read %s: %w", prefix, err)
	}
	return out, nil
}
