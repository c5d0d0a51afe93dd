package rollout

import (
	"context"
	"errors"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// lateReleases keeps, for the ACK batcher, the snapshots and plans of
// releases the views do not keep, from one batch to the next: after a
// promotion every instance reports its superseded release STALE, and
// reading the release's records and laying out its plan (all its
// members) once per batch was most of judging those reports. An entry
// read at revision at stays good while nothing under its config's records
// changed since (the views say when last something did), and not across
// a new snapshot of the views. Only the batcher's goroutine uses it.
type lateReleases struct {
	kept map[lateKey]lateRelease
}

type lateKey struct {
	config string
	gen    int64
}

type lateRelease struct {
	rv releaseView
	at int64
}

// maxLateReleases bounds the releases kept; past it, one goes for each
// new one.
const maxLateReleases = 64

// dropChangedLocked forgets the kept release of gen of config if its
// config's records changed since it was read. The caller holds the views'
// lock.
func (l *lateReleases) dropChangedLocked(v *views, config string, gen int64) {
	k := lateKey{config, gen}
	e, ok := l.kept[k]
	if !ok {
		return
	}
	if cv := v.configs[config]; cv == nil || e.at < v.since || cv.changed > e.at {
		delete(l.kept, k)
	}
}

// put keeps rv, read at revision at.
func (l *lateReleases) put(config string, gen int64, rv releaseView, at int64) {
	if l.kept == nil {
		l.kept = map[lateKey]lateRelease{}
	}
	for k := range l.kept {
		if len(l.kept) < maxLateReleases {
			break
		}
		delete(l.kept, k)
	}
	l.kept[lateKey{config, gen}] = lateRelease{rv: rv, at: at}
}

// lateAckView completes av, the instance's part of the view of an ACK of
// a release the views do not keep, read from the views at rev: the
// release's snapshot and plan as kept (or read at rev and kept), and the
// instance's ACKs of it at rev from the store. A release read in this
// batch is in plans too, so that more releases than are kept cost a read
// per release and batch, not per ACK. When the store no longer holds
// rev, it is ackViewFromStore.
func (b *ackBatcher) lateAckView(ctx context.Context, a Ack, av ackView, rev int64, plans storedPlans) (ackView, error) {
	e, ok := b.late.kept[lateKey{a.ConfigID, a.Generation}]
	if !ok {
		pk := storedPlanKey{config: a.ConfigID, gen: a.Generation, rev: rev}
		rv, ok := plans[pk]
		if !ok {
			s, err := b.r.load(ctx, a.ConfigID, a.Generation, rev)
			if errors.Is(err, store.ErrCompacted) {
				return b.r.ackViewFromStore(ctx, a.ConfigID, a.Generation, a.WorkloadIdentity, plans)
			}
			if err != nil {
				return ackView{}, err
			}
			rv = releaseView{snapshot: s, plan: newPlan(s.rel, s.retired)}
			plans[pk] = rv
		}
		e = lateRelease{rv: rv, at: rev}
		b.late.put(a.ConfigID, a.Generation, rv, rev)
	}
	av.releaseView = e.rv
	av.snapshot.rev, av.snapshot.now = rev, b.r.now()
	prev, err := b.r.acksAt(ctx, a.ConfigID, a.Generation, a.WorkloadIdentity, rev)
	if errors.Is(err, store.ErrCompacted) {
		return b.r.ackViewFromStore(ctx, a.ConfigID, a.Generation, a.WorkloadIdentity, plans)
	}
	if err != nil {
		return ackView{}, err
	}
	av.addStored(prev)
	return av, nil
}
