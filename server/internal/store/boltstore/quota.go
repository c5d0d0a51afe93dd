package boltstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// usage counts the store's size against its quota (store.Quota).
//
// The size is the bytes of bbolt's pages in use (its file up to the
// high-water mark, less the free and pending pages of its freelist:
// what deletions and compaction free, bbolt reuses, so the size falls
// with them although the file never shrinks), plus what the write-ahead
// log holds that bbolt does not yet, counted at pageFactor times
// store.PutCost per change.
// The log's segments themselves are not counted: they are allocated
// ahead (64 MiB each, at most two besides those bbolt has not caught up
// with) and deleted once bbolt holds their changes.
type usage struct {
	quota store.Quota
	now   func() time.Time
	// pageSize is bbolt's, read at Open: db.Info reads the mapping, which
	// a concurrent write may replace.
	pageSize int64

	// inUse is bbolt's pages in use, as the last measure found.
	inUse atomic.Int64
	// unapplied is the cost of the changes decided and not yet in bbolt,
	// and of blobs and records being written.
	unapplied atomic.Int64

	mu    sync.Mutex // guards alarm, and makes admit's check and add one step
	alarm *store.Alarm
}

func (u *usage) used() int64 { return u.inUse.Load() + u.unapplied.Load() }

// admit checks a write of cost bytes against the quota and, when it is
// admitted, counts it in unapplied until release. A refusal raises the
// alarm; a size under the low-water mark clears it first.
func (u *usage) admit(cost int64, reserved bool) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	used := u.used()
	u.settleLocked(used)
	if err := u.quota.Admit(used, cost, u.alarm != nil, reserved); err != nil {
		if u.alarm == nil && u.quota.Raises(used) {
			u.alarm = &store.Alarm{Kind: store.AlarmNoSpace, Since: u.now(), Used: used}
		}
		return err
	}
	u.unapplied.Add(cost)
	return nil
}

// measured records bbolt's pages in use, then settles the alarm.
func (u *usage) measured(inUse int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.inUse.Store(inUse)
	u.settleLocked(u.used())
}

// settleLocked raises the alarm at or over the quota (reports that used
// the reserve, a store reopened with a smaller quota) and clears it under
// the low-water mark. The caller holds mu.
func (u *usage) settleLocked(used int64) {
	switch {
	case !u.quota.On():
		u.alarm = nil
	case u.alarm == nil && used >= u.quota.Bytes:
		u.alarm = &store.Alarm{Kind: store.AlarmNoSpace, Since: u.now(), Used: used}
	case u.alarm != nil && used < u.quota.LowWater():
		u.alarm = nil
	}
}

// pageFactor is how much more than store.PutCost a write takes of
// bbolt's pages: bbolt splits a full page into halves (its fill percent,
// 50%), so keys written in order leave pages half full, and a value near
// a page's size takes two pages. A write is admitted, and counted until
// bbolt holds it, at this many times its cost, so that the size measured
// once bbolt holds it is rarely more than what was admitted.
const pageFactor = 2

// eventCost is what a decided change counts until bbolt holds it.
func eventCost(ev store.Event) int64 { return pageFactor * store.PutCost(ev.KV.Key, ev.KV.Value) }

func eventsCost(evs []store.Event) int64 {
	var n int64
	for _, ev := range evs {
		n += eventCost(ev)
	}
	return n
}

// requestCost is what a request must be admitted for, and whether it may
// use the reserve: its puts, not its deletions.
func requestCost(q store.Quota, r *request) (int64, bool) {
	switch {
	case r.put != nil:
		return pageFactor * store.PutCost(r.put.Key, r.put.Value), q.MayUseReserve([]store.Put{*r.put})
	case r.txn != nil:
		return pageFactor * store.TxnCost(r.txn.Puts), q.MayUseReserve(r.txn.Puts)
	}
	return 0, false
}

// measure reads how many bytes of bbolt's pages are in use and records
// it. A closed database leaves the last measure.
func (s *Store) measure() {
	var size int64
	if err := s.db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		return
	}
	st := s.db.Stats()
	free := int64(st.FreePageN+st.PendingPageN) * s.usage.pageSize
	s.usage.measured(size - free)
}

// Usage implements store.UsageReporter. It is safe to call at any time,
// and cheap: it reads counters that the writes keep.
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	if err := ctx.Err(); err != nil {
		return store.Usage{}, err
	}
	u := &s.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	used := u.used()
	u.settleLocked(used)
	out := store.Usage{Used: used, Quota: u.quota.Bytes, Reserve: u.quota.Reserve}
	if u.alarm != nil {
		a := *u.alarm
		out.Alarm = &a
	}
	return out, nil
}
