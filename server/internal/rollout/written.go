package rollout

import (
	"bytes"
	"sync"

	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// writtenRecords holds, while a batch of ACKs commits, the records it
// writes that the views read back (each ACK's record and applied record),
// as encoded and as decoded: the views, applying the commit's events,
// take each from here instead of decoding its JSON again. An event is
// taken from here only when its key and its value, byte for byte, are
// what the batch wrote, so the views see exactly what decoding the
// stored record would give; any other event (another replica's write, a
// record written by a single ACK's transaction) is decoded as before.
//
// The batches add a batch's records before its transaction (the store may
// hand the events to the views before the transaction returns), and clear
// what is left once the views passed the commit (or the transaction
// failed), so it holds at most about one batch.
type writtenRecords struct {
	mu    sync.Mutex
	byKey map[string]writtenRecord
}

// writtenRecord is one record a batch writes: its key and value as
// stored, and one of ack or applied as decoded.
type writtenRecord struct {
	key     string
	value   []byte
	ack     *Ack
	applied *AppliedRecord
}

// add notes rec.
func (w *writtenRecords) add(rec writtenRecord) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byKey == nil {
		w.byKey = map[string]writtenRecord{}
	}
	w.byKey[rec.key] = rec
}

// take returns, and lets go of, the record kv holds when a batch wrote
// it as noted (ok false otherwise: decode kv).
func (w *writtenRecords) take(kv store.KeyValue) (writtenRecord, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rec, ok := w.byKey[kv.Key]
	if !ok || !bytes.Equal(rec.value, kv.Value) {
		return writtenRecord{}, false
	}
	delete(w.byKey, kv.Key)
	return rec, true
}

// clear lets go of every record noted.
func (w *writtenRecords) clear() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.byKey)
}

// ackOf decodes a stored ACK, or takes it as a batch wrote it.
func (w *writtenRecords) ackOf(kv store.KeyValue) (Ack, error) {
	if rec, ok := w.take(kv); ok && rec.ack != nil {
		return *rec.ack, nil
	}
	return decodeAck(kv)
}

// appliedOf decodes a stored applied record, or takes it as a batch
// wrote it.
func (w *writtenRecords) appliedOf(kv store.KeyValue) (AppliedRecord, error) {
	if rec, ok := w.take(kv); ok && rec.applied != nil {
		return *rec.applied, nil
	}
	var rec AppliedRecord
	if err := records.Decode(kv, &rec); err != nil {
		return AppliedRecord{}, err
	}
	return rec, nil
}
