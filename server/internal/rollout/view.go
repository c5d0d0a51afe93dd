package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// views is the state of every config's rollout, computed once per change
// and shared by every request and every assignment stream: each config's
// pointer and newest generation, a tracked tally of its newest and of its
// active release (and, after a promotion, of the release it superseded),
// every instance's registration, and what each instance reported running.
//
// # Design
//
// One goroutine (run) owns the writes. It reads everything at one store
// revision, then follows the store's change feed from the next revision,
// through a watch hub, applying each event in revision order: an ACK moves
// one member's state in the tallies of its release, a registration resets
// what that instance reported, a new head makes a new release the newest, a
// pointer move makes another release the active one. The views are always
// the store's state at one revision, rev. If the feed fails (its revision
// was compacted, or the store is unreachable) the views are read again from
// a fresh snapshot.
//
// Readers take the read lock and copy what they need; everything a
// decision keeps after the lock (plans, progress, stop records, retirement
// maps, releases) is replaced on change, never modified. A decision made on
// the views at rev commits with store.Txn conditions on what it read being
// unchanged since rev, so views that lag the store cost a retry, never a
// wrong answer; WaitFor lets a caller read its own writes.
type views struct {
	r *Rollouts

	mu      sync.RWMutex
	ready   bool  // the first snapshot was read
	rev     int64 // the revision the views are at
	since   int64 // the revision of the snapshot they follow from
	configs map[string]*configView
	order   []string                        // the configs' IDs, sorted
	regs    map[string]registration         // every registration, by identity
	applied map[string]map[string]applyInfo // config -> identity -> what it last reported applying
	// advanced is closed, and replaced, whenever rev moves.
	advanced chan struct{}
	// feed is the watcher the views follow (nil between snapshots): a
	// reader that waits for a revision asks it for progress.
	feed *watch.Watcher
	// failed is the reason the views stopped following the feed for good
	// (their context ended), or nil.
	failed error
	// deadlines holds, earliest first, when each candidate release stops;
	// deadlineMoved is closed, and replaced, when an earlier one arrives.
	deadlines     deadlines
	deadlineMoved chan struct{}
}

// configView is one config's state.
type configView struct {
	ptr  Pointer
	head int64
	// changed is the revision of the last event under the config's records
	// since the snapshot (0: none).
	changed int64
	newest  *tracked // the release at head (nil before the first)
	active  *tracked // the release the pointer names (nil before the first promotion)
	// superseded is the release the pointer last moved away from, kept
	// until a newer release is cut (nil: none): after a promotion every
	// instance reports it STALE, and judging those reports from the views
	// reads nothing from the store. Its rollout is over, so every report
	// of it is late and none counts: it keeps only what judging one needs
	// (untallied), and a status of it, or a rollback to it, reads it from
	// the store as for any other release.
	superseded *tracked
}

// applyInfo is an applied record, as much as a judgement needs.
type applyInfo struct {
	gen           int64
	contentDigest string
	boot          string
	epoch         int64
	seq           int64
	// rev is the record's store revision: an ACK's write compares it.
	rev int64
}

func newViews(r *Rollouts) *views {
	return &views{r: r, configs: map[string]*configView{}, regs: map[string]registration{},
		applied: map[string]map[string]applyInfo{}, advanced: make(chan struct{}), deadlineMoved: make(chan struct{})}
}

// run keeps the views current until ctx ends: a snapshot, then the feed
// from hub, and a fresh snapshot whenever the feed fails. Its exit is ctx.
// A snapshot that fails (a record that cannot be read) is tried again
// after a pause that doubles up to maxFollowPause, not in a loop that
// takes a core; after a feed that failed past a good snapshot (it fell
// behind a compaction) the pause is minFollowPause.
func (v *views) run(ctx context.Context, hub *watch.Hub) {
	pause := minFollowPause
	for ctx.Err() == nil {
		snapshotted, err := v.follow(ctx, hub)
		if ctx.Err() != nil {
			break
		}
		if snapshotted {
			pause = minFollowPause
		}
		v.r.log.Warn("rollout views read again from a snapshot", "error", err, "after", pause)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		pause = min(2*pause, maxFollowPause)
	}
	v.mu.Lock()
	v.failed = errors.Join(ctx.Err(), errors.New("rollout: the rollout views stopped"))
	close(v.advanced)
	v.advanced = make(chan struct{})
	v.mu.Unlock()
}

// follow reads a snapshot, then applies the feed until it fails;
// snapshotted says whether it got past the snapshot.
func (v *views) follow(ctx context.Context, hub *watch.Hub) (snapshotted bool, err error) {
	rev, err := v.r.currentRevision(ctx)
	if err != nil {
		return false, err
	}
	snap, err := v.r.readViews(ctx, rev)
	if err != nil {
		return false, err
	}
	w, err := hub.Watch(ctx, store.SystemPrefix, rev+1)
	if err != nil {
		return false, err
	}
	defer func() {
		v.mu.Lock()
		v.feed = nil
		v.mu.Unlock()
		w.Close()
	}()
	v.mu.Lock()
	v.feed = w
	v.configs, v.regs, v.applied = snap.configs, snap.regs, snap.applied
	v.order = slices.Sorted(maps.Keys(snap.configs))
	v.deadlines = v.deadlines[:0]
	for config, cv := range v.configs {
		v.scheduleLocked(config, cv.newest)
	}
	v.wakeSupervisorLocked()
	v.ready = true
	v.since = rev
	v.advanceLocked(rev)
	v.mu.Unlock()
	for {
		batch, err := w.Next(ctx)
		if err != nil {
			return true, err
		}
		if len(batch.Events) == 0 {
			// A progress notice: every change under /_pawl/ up to it was
			// applied, so the views are the store's state there. Writes
			// outside /_pawl/ move the store's revision only this way.
			v.mu.Lock()
			if batch.Progress > v.rev {
				v.advanceLocked(batch.Progress)
			}
			v.mu.Unlock()
			continue
		}
		if err := v.apply(ctx, batch.Events); err != nil {
			return true, err
		}
	}
}

// minFollowPause and maxFollowPause bound the pause before the views
// read a snapshot again after their feed or snapshot failed.
const (
	minFollowPause = 10 * time.Millisecond
	maxFollowPause = time.Second
)

func (v *views) advanceLocked(rev int64) {
	v.rev = rev
	close(v.advanced)
	v.advanced = make(chan struct{})
}

// apply applies events, in revision order, and moves rev past the last.
// What needs the store (a release that becomes the newest or the active
// one) is read before the lock, at the event's revision. The events
// between two such are applied under one lock, and rev moves once for
// them: a batch of ACKs' hundreds of records wake a waiter once, not once
// each. An event that cannot be applied ends it, rev past the last one
// applied: a reader waiting for that event's revision must not be told
// the views hold it.
func (v *views) apply(ctx context.Context, events []store.Event) error {
	for i := 0; i < len(events); {
		load, err := v.loadFor(ctx, events[i])
		if err != nil {
			return err
		}
		v.mu.Lock()
		applied := 0
		for err = v.applyLocked(events[i], load); err == nil; err = v.applyLocked(events[i], nil) {
			applied++
			if i++; i == len(events) || movesRelease(events[i]) {
				break
			}
		}
		if applied > 0 {
			v.advanceLocked(events[i-1].Revision())
		}
		v.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// movesRelease reports whether ev may make another release of its config
// the newest or the active one: a put of its head or pointer.
func movesRelease(ev store.Event) bool {
	config, rest, isConfig := strings.Cut(strings.TrimPrefix(ev.KV.Key, records.ConfigsPrefix), "/")
	return config != "" && isConfig && strings.HasPrefix(ev.KV.Key, records.ConfigsPrefix) && ev.Type == store.EventPut && (rest == "head" || rest == "active")
}

// loadFor reads the release that ev makes the newest or the active one
// of its config, when the views do not track it yet (nil otherwise).
func (v *views) loadFor(ctx context.Context, ev store.Event) (*tracked, error) {
	if !movesRelease(ev) {
		return nil, nil
	}
	config, rest, _ := strings.Cut(strings.TrimPrefix(ev.KV.Key, records.ConfigsPrefix), "/")
	var gen int64
	if rest == "head" {
		var err error
		if gen, err = records.HeadGeneration(ev.KV.Value); err != nil {
			return nil, err
		}
	} else {
		var p Pointer
		if err := records.Decode(ev.KV, &p); err != nil {
			return nil, err
		}
		gen = p.Generation
	}
	if v.tracks(config, gen) {
		return nil, nil
	}
	t, err := v.r.loadTracked(ctx, config, gen, ev.Revision())
	if err != nil {
		return nil, fmt.Errorf("rollout views: load %s generation %d at revision %d: %w", config, gen, ev.Revision(), err)
	}
	return t, nil
}

// tracks reports whether the views already track generation gen of
// config, with its tallies.
func (v *views) tracks(config string, gen int64) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.findTalliedLocked(config, gen) != nil
}

// findLocked is the tracked release gen of config, or nil: the newest,
// the active, or the superseded one, whose tallies the views let go.
// Events of the release and judging its ACKs need no more. The caller
// holds mu.
func (v *views) findLocked(config string, gen int64) *tracked {
	if cv := v.configs[config]; cv != nil {
		for _, t := range cv.kept() {
			if t != nil && t.rel.Generation == gen {
				return t
			}
		}
	}
	return nil
}

// findTalliedLocked is findLocked of the newest or the active release
// only, which the views keep whole: a status, a promotion and a release
// becoming the newest or the active one need its tallies. The caller
// holds mu.
func (v *views) findTalliedLocked(config string, gen int64) *tracked {
	if t := v.findLocked(config, gen); t != nil && !t.untallied {
		return t
	}
	return nil
}

// kept are the releases the views keep of the config (any may be nil;
// the newest may also be the active one).
func (cv *configView) kept() [3]*tracked { return [3]*tracked{cv.newest, cv.active, cv.superseded} }

// applyLocked applies one event; load is the release the event makes
// newest or active, when it was not tracked. The caller holds mu.
func (v *views) applyLocked(ev store.Event, load *tracked) error {
	key := ev.KV.Key
	switch {
	case strings.HasPrefix(key, records.InstancesPrefix):
		id := strings.TrimPrefix(key, records.InstancesPrefix)
		if ev.Type == store.EventDelete {
			delete(v.regs, id)
		} else {
			rec, err := decodeRegistration(ev.KV)
			if err != nil {
				return err
			}
			v.regs[id] = rec
		}
		for _, cv := range v.configs {
			for _, t := range cv.kept() {
				if t != nil {
					t.reregistered(id)
				}
			}
		}
	case strings.HasPrefix(key, records.AcksPrefix) && ev.Type == store.EventDelete:
		c, g, id, arrival, err := records.ParseAck(key)
		if err != nil {
			return err
		}
		if t := v.findLocked(c, g); t != nil {
			t.removeAck(id, arrival)
		}
	case strings.HasPrefix(key, records.AcksPrefix):
		a, err := v.r.written.ackOf(ev.KV)
		if err != nil {
			return err
		}
		if t := v.findLocked(a.ConfigID, a.Generation); t != nil {
			reg, ok := v.regs[a.WorkloadIdentity]
			t.addAck(a, reg, ok)
		}
	case strings.HasPrefix(key, records.AppliedPrefix):
		rec, err := v.r.written.appliedOf(ev.KV)
		if err != nil {
			return err
		}
		byID := v.applied[rec.ConfigID]
		if byID == nil {
			byID = map[string]applyInfo{}
			v.applied[rec.ConfigID] = byID
		}
		byID[rec.WorkloadIdentity] = applyInfoOf(rec, ev.KV.ModRevision)
	case strings.HasPrefix(key, records.ConfigsPrefix):
		return v.applyConfigLocked(ev, load)
	}
	return nil
}

// applyConfigLocked applies an event under records.ConfigsPrefix. The
// caller holds mu.
func (v *views) applyConfigLocked(ev store.Event, load *tracked) error {
	config, rest, _ := strings.Cut(strings.TrimPrefix(ev.KV.Key, records.ConfigsPrefix), "/")
	cv := v.configs[config]
	if cv == nil {
		cv = &configView{}
		v.configs[config] = cv
		i, _ := slices.BinarySearch(v.order, config)
		v.order = slices.Insert(v.order, i, config)
	}
	cv.changed = ev.Revision()
	what, tail, _ := strings.Cut(rest, "/")
	switch what {
	case "head":
		gen, err := records.HeadGeneration(ev.KV.Value)
		if err != nil {
			return err
		}
		if gen != cv.head {
			// A newer release was cut: the reports of the one the last
			// promotion superseded are over.
			cv.superseded = nil
		}
		cv.head = gen
		if t := v.findTalliedLocked(config, gen); t != nil {
			cv.newest = t
		} else {
			cv.newest = load
		}
		v.scheduleLocked(config, cv.newest)
	case "active":
		var p Pointer
		if err := records.Decode(ev.KV, &p); err != nil {
			return err
		}
		p.Revision = ev.KV.ModRevision
		cv.ptr = p
		left := cv.active
		if t := v.findTalliedLocked(config, p.Generation); t != nil {
			cv.active = t
		} else {
			cv.active = load
		}
		if cv.superseded != nil && cv.superseded.rel.Generation == p.Generation {
			cv.superseded = nil // rolled back to it: read again whole, it is the active one
		}
		if left != nil && left != cv.active && left != cv.newest {
			left.letGoOfTallies()
			cv.superseded = left
		}
	case "progress", "stops":
		gen, err := records.ParseGeneration(tail)
		if err != nil {
			return fmt.Errorf("rollout views: %s: %w", ev.KV.Key, err)
		}
		t := v.findLocked(config, gen)
		if t == nil {
			return nil
		}
		if what == "stops" {
			var s Stop
			if err := records.Decode(ev.KV, &s); err != nil {
				return err
			}
			s.Revision = ev.KV.ModRevision
			t.stop = &s
			return nil
		}
		var p Progress
		if err := records.Decode(ev.KV, &p); err != nil {
			return err
		}
		p.Revision = ev.KV.ModRevision
		t.progress = p
	case "retired":
		genPart, _, _ := strings.Cut(tail, "/")
		gen, err := records.ParseGeneration(genPart)
		if err != nil {
			return fmt.Errorf("rollout views: %s: %w", ev.KV.Key, err)
		}
		if t := v.findLocked(config, gen); t != nil {
			var rt Retirement
			if err := records.Decode(ev.KV, &rt); err != nil {
				return err
			}
			rt.Revision = ev.KV.ModRevision
			t.retire(rt)
		}
	}
	return nil
}

// waitFor blocks until the views are at revision rev or later (0: until
// they read their first snapshot). It fails when ctx ends or the views
// stopped. While it waits it asks the feed for progress, so that a
// revision moved only by writes outside /_pawl/ is reached as soon as the
// hub has published it, not at the next progress tick.
func (v *views) waitFor(ctx context.Context, rev int64) error {
	return v.waitUntil(ctx, rev, true)
}

// waitUntil is waitFor; without progress, it does not ask the feed for
// progress: for a revision that an event under /_pawl/ brings (a write of
// the caller's own records), which the feed delivers unasked.
func (v *views) waitUntil(ctx context.Context, rev int64, progress bool) error {
	for {
		v.mu.RLock()
		ready, at, advanced, failed, feed := v.ready, v.rev, v.advanced, v.failed, v.feed
		v.mu.RUnlock()
		switch {
		case failed != nil:
			return failed
		case ready && at >= rev:
			return nil
		}
		if feed != nil && rev > 0 && progress {
			feed.RequestProgress()
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// current waits until the views have every change committed before the
// call: a reader reads its own writes.
func (v *views) current(ctx context.Context) error {
	rev, err := v.r.currentRevision(ctx)
	if err != nil {
		return err
	}
	return v.waitFor(ctx, rev)
}
