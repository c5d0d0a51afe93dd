package rollout

import (
	"container/heap"
	"time"
)

// deadline is the moment a release that is still a candidate stops.
type deadline struct {
	at     time.Time
	config string
	gen    int64
}

// deadlines is a min-heap of deadlines, earliest first. An entry is pushed
// when a release becomes its config's newest and is checked when it comes
// due: if the release was promoted, stopped or replaced by then, the entry
// is dropped. Nothing scans the configs to find what is due.
type deadlines []deadline

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(deadline)) }
func (d *deadlines) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// scheduleLocked adds t's deadline when t is a candidate, and wakes the
// supervisor when it is the new earliest. The caller holds v.mu.
func (v *views) scheduleLocked(config string, t *tracked) {
	if t == nil || t.stop != nil {
		return
	}
	d := deadline{at: t.rel.CreatedAt.Add(t.rel.Deadline), config: config, gen: t.rel.Generation}
	earliest := len(v.deadlines) == 0 || d.at.Before(v.deadlines[0].at)
	heap.Push(&v.deadlines, d)
	if earliest {
		v.wakeSupervisorLocked()
	}
}

// wakeSupervisorLocked tells the supervisor that the earliest deadline
// moved. The caller holds v.mu.
func (v *views) wakeSupervisorLocked() {
	close(v.deadlineMoved)
	v.deadlineMoved = make(chan struct{})
}

// nextDeadline is the earliest scheduled deadline (zero when none) and a
// channel closed when an earlier one is scheduled.
func (v *views) nextDeadline() (time.Time, <-chan struct{}) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if len(v.deadlines) == 0 {
		return time.Time{}, v.deadlineMoved
	}
	return v.deadlines[0].at, v.deadlineMoved
}

// due removes and returns the deadlines at or before now whose release is
// still its config's newest candidate: not promoted and not stopped.
func (v *views) due(now time.Time) []deadline {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []deadline
	seen := map[deadline]bool{}
	for len(v.deadlines) > 0 && !v.deadlines[0].at.After(now) {
		d := heap.Pop(&v.deadlines).(deadline)
		cv := v.configs[d.config]
		if seen[d] || cv == nil || cv.newest == nil || cv.head != d.gen || cv.newest.rel.Generation != d.gen ||
			cv.ptr.promoted(d.gen) || cv.newest.stop != nil {
			continue
		}
		seen[d] = true
		out = append(out, d)
	}
	return out
}

// reschedule puts back deadlines whose settling failed, to be tried again.
func (v *views) reschedule(ds []deadline) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, d := range ds {
		heap.Push(&v.deadlines, d)
	}
}
