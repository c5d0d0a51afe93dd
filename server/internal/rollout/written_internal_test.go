package rollout

import (
	"testing"

	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestWrittenRecordsAreTakenOnlyAsWritten: the views take a batch's ACK
// as judged only for the very bytes the batch wrote at its key; another
// value at that key (another writer's) is decoded, and a record is taken
// once.
func TestWrittenRecordsAreTakenOnlyAsWritten(t *testing.T) {
	judged := Ack{ConfigID: "routing", Generation: 1, WorkloadIdentity: "i0", BootID: "b", State: Applied, Counted: true, arrival: 7}
	value, err := records.Encode(judged)
	if err != nil {
		t.Fatal(err)
	}
	key := records.Ack("routing", 1, "i0", 7)
	var w writtenRecords
	w.add(writtenRecord{key: key, value: value, ack: &Ack{Reason: "as noted"}})

	other := Ack{ConfigID: "routing", Generation: 1, WorkloadIdentity: "i0", BootID: "b", State: Applied, Why: "another writer's", arrival: 7}
	otherValue, err := records.Encode(other)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.ackOf(store.KeyValue{Key: key, Value: otherValue})
	if err != nil || got.Why != "another writer's" || got.Reason != "" {
		t.Fatalf("another value at the key read %+v, %v; want it decoded", got, err)
	}
	if got, err := w.ackOf(store.KeyValue{Key: key, Value: value}); err != nil || got.Reason != "as noted" {
		t.Fatalf("the batch's value read %+v, %v; want the ACK as noted", got, err)
	}
	if got, err := w.ackOf(store.KeyValue{Key: key, Value: value}); err != nil || got.Reason != "" || !got.Counted {
		t.Fatalf("read again, it is %+v, %v; want it decoded (taken once)", got, err)
	}
	w.add(writtenRecord{key: key, value: value, ack: &judged})
	w.clear()
	if _, ok := w.take(store.KeyValue{Key: key, Value: value}); ok {
		t.Fatal("a record was taken after clear")
	}
}
