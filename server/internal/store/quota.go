package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Quota bounds how many bytes a store holds, as etcd's
// --quota-backend-bytes does. The engine counts its size (Usage.Used) and
// refuses, atomically with the write, any write that would take it past
// the quota; deletions and compaction are never refused, since they are
// how a user gets back under it.
//
// A write refused for the quota when the store holds nine tenths of it
// or more (the low-water mark), and a size at or over the quota, raise
// the NOSPACE alarm. While it is raised, every write that adds bytes is
// refused, except those that may use the reserve; it clears by itself
// once deletions and compaction take the size under the low-water mark,
// so that one freed byte does not let writes in only for the next to
// raise it again. (A large write refused under the low-water mark is
// refused alone: smaller ones still fit, and no alarm is raised.)
type Quota struct {
	// Bytes is the quota; 0 means none.
	Bytes int64
	// Reserve is how many bytes past Bytes the writes that Reserved allows
	// may still take: a fleet's reports and the rollout's own records,
	// which must land during an incident that filled the store.
	Reserve int64
	// Reserved says whether a put of key may use the reserve; a
	// transaction may when every one of its puts may. Nil: none may.
	// Records (PutRecords: instance leases) always may.
	Reserved func(key string) bool
}

// On says whether the quota is enforced.
func (q Quota) On() bool { return q.Bytes > 0 }

// LowWater is the size under which a raised alarm clears: nine tenths
// of the quota.
func (q Quota) LowWater() int64 { return q.Bytes - q.Bytes/10 }

// Raises says whether a write refused at a size of used raises the alarm.
func (q Quota) Raises(used int64) bool { return used >= q.LowWater() }

// MayUseReserve says whether every put of t may use the reserve.
func (q Quota) MayUseReserve(puts []Put) bool {
	if q.Reserved == nil || len(puts) == 0 {
		return false
	}
	for _, p := range puts {
		if !q.Reserved(p.Key) {
			return false
		}
	}
	return true
}

// Validate checks the quota's numbers.
func (q Quota) Validate() error {
	if q.Bytes < 0 || q.Reserve < 0 {
		return fmt.Errorf("store: quota %d bytes with a reserve of %d: neither may be negative", q.Bytes, q.Reserve)
	}
	return nil
}

// Admit decides a write of cost bytes against a store of used bytes whose
// alarm is raised or not (alarmed), and whether it may use the reserve.
// It returns nil, or the *QuotaError to refuse the write with. A write
// that adds nothing (cost 0: a deletion) is always admitted. Engines call
// it where they decide writes, one at a time, so that two writers just
// under the quota cannot both pass it.
func (q Quota) Admit(used, cost int64, alarmed, reserved bool) *QuotaError {
	if !q.On() || cost <= 0 {
		return nil
	}
	limit := q.Bytes
	if reserved {
		limit += q.Reserve
	}
	if used+cost <= limit && (reserved || !alarmed) {
		return nil
	}
	return &QuotaError{Quota: q.Bytes, Reserve: q.Reserve, Used: used, Cost: cost, Reserved: reserved, Alarmed: alarmed && used+cost <= limit}
}

// PutCost is what a put counts against the quota before it is written:
// its key four times and its value twice (the current record and the
// change-log entry, each with its key, the index entry and the key list),
// and 256 bytes for their headers. It is at least what either engine's
// size grows by, so that the check before a write bounds the size after
// it.
func PutCost(key string, value []byte) int64 {
	return 4*int64(len(key)) + 2*int64(len(value)) + 256
}

// TxnCost is the sum of PutCost over puts; deletions cost nothing.
func TxnCost(puts []Put) int64 {
	var n int64
	for _, p := range puts {
		n += PutCost(p.Key, p.Value)
	}
	return n
}

// BlobCost is what a blob counts against the quota.
func BlobCost(b Blob) int64 {
	return 2*int64(len(b.ID)) + int64(len(b.Meta)) + int64(len(b.Data)) + 256
}

// RecordsCost is what records count against the quota, at most (a record
// that replaces one frees the old one's bytes).
func RecordsCost(recs []Record) int64 {
	var n int64
	for _, r := range recs {
		n += 3*int64(len(r.ID)) + int64(len(r.Value)) + 64
	}
	return n
}

// ErrQuotaExceeded means a write would take the store past its quota, or
// the NOSPACE alarm is raised: delete keys and let compaction run (or
// raise the quota).
var ErrQuotaExceeded = errors.New("store: storage quota exceeded")

// QuotaError says why a write was refused for the quota. It matches
// ErrQuotaExceeded.
type QuotaError struct {
	// Quota and Reserve are the store's quota.
	Quota, Reserve int64
	// Used is the store's size when the write was refused, and Cost what
	// the write would have added.
	Used, Cost int64
	// Reserved says the write could use the reserve.
	Reserved bool
	// Alarmed says the write would have fit, and was refused because the
	// NOSPACE alarm is raised (it clears under the low-water mark).
	Alarmed bool
}

func (e *QuotaError) Error() string {
	if e.Alarmed {
		return fmt.Sprintf("store: the NOSPACE alarm is raised: the store holds %d bytes of its %d-byte quota, and writes are refused until deletions and compaction take it under %d bytes (nine tenths of the quota)",
			e.Used, e.Quota, Quota{Bytes: e.Quota}.LowWater())
	}
	limit := fmt.Sprintf("its %d-byte quota", e.Quota)
	if e.Reserved {
		limit = fmt.Sprintf("its %d-byte quota and the %d-byte reserve for reports", e.Quota, e.Reserve)
	}
	return fmt.Sprintf("store: a write of %d bytes would take the store from %d bytes past %s", e.Cost, e.Used, limit)
}

// Is reports whether target is ErrQuotaExceeded.
func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExceeded }

// AlarmNoSpace is the kind of the alarm a store raises over its quota,
// as etcd names it.
const AlarmNoSpace = "NOSPACE"

// Alarm is a raised alarm.
type Alarm struct {
	// Kind is AlarmNoSpace.
	Kind string
	// Since is when it was raised.
	Since time.Time
	// Used is the store's size when it was raised.
	Used int64
}

// Usage is a store's size against its quota.
type Usage struct {
	// Used is the store's size in bytes, as the engine counts it.
	Used int64
	// Quota and Reserve are the store's quota (0: none).
	Quota, Reserve int64
	// Alarm is the raised NOSPACE alarm, or nil.
	Alarm *Alarm
}

// UsageReporter is implemented by engines that count their size and
// enforce a quota.
type UsageReporter interface {
	// Usage returns the store's size, quota and alarm.
	Usage(ctx context.Context) (Usage, error)
}
