package boltstore

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestTheLengthsAreThoseOfTheEncodings: the log writes an entry's length
// before the entry (appendEvent): a length that is not its encoding's
// would make the log unreadable. (The applier sizes its buffer with the
// same lengths; a wrong one there would only cost an allocation.)
// Checked on the edges of every varint length from 1 to 10 bytes (each
// 7-bit step, negative values, zero and negative times), for puts and
// deletes, on random events with keys and values of any length, and by
// decoding each entry and record back (a delete's value is not read).
func TestTheLengthsAreThoseOfTheEncodings(t *testing.T) {
	var edges []int64
	for bits := 7; bits < 64; bits += 7 {
		edges = append(edges, 1<<bits-1, 1<<bits)
	}
	edges = append(edges, 0, 1, math.MaxInt64, -1, math.MinInt64)
	times := []time.Time{{}, time.Unix(0, 0), time.Unix(0, -1), time.Unix(0, 63), time.Unix(0, 64), time.Unix(0, -65), time.Now(), time.Unix(0, math.MaxInt64), time.Unix(0, math.MinInt64)}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vs []int64) int64 {
		if rng.IntN(4) == 0 {
			return rng.Int64() >> rng.IntN(64)
		}
		return vs[rng.IntN(len(vs))]
	}
	for i := range 5000 {
		ev := store.Event{
			Type: []store.EventType{store.EventPut, store.EventDelete}[rng.IntN(2)], More: rng.IntN(2) == 0, Time: times[rng.IntN(len(times))],
			PrevRevision: pick(edges),
			KV: store.KeyValue{Key: strings.Repeat("k", rng.IntN(300)), Value: make([]byte, rng.IntN(300)),
				CreateRevision: pick(edges), ModRevision: pick(edges), Version: pick(edges)},
		}
		if i%7 == 0 {
			ev.Time = time.Unix(0, rng.Int64()-math.MaxInt64/2)
		}
		if got, want := eventLen(ev), len(appendEvent(nil, ev)); got != want {
			t.Fatalf("eventLen(%+v) = %d, its entry is %d bytes", ev, got, want)
		}
		if got, want := recordLen(ev.KV), len(appendRecord(nil, ev.KV)); got != want {
			t.Fatalf("recordLen(%+v) = %d, its record is %d bytes", ev.KV, got, want)
		}
		back, err := decodeEvent(ev.Revision(), appendEvent(nil, ev))
		if err != nil || back.Type != ev.Type || back.More != ev.More || back.KV.Key != ev.KV.Key || back.PrevRevision != ev.PrevRevision ||
			back.KV.CreateRevision != ev.KV.CreateRevision || back.KV.Version != ev.KV.Version || back.KV.ModRevision != ev.Revision() ||
			(ev.Type == store.EventPut && len(back.KV.Value) != len(ev.KV.Value)) || !back.Time.Equal(time.Unix(0, ev.Time.UnixNano())) {
			t.Fatalf("event %+v decoded as %+v, %v", ev, back, err)
		}
		rec, err := decodeRecord(ev.KV.Key, appendRecord(nil, ev.KV))
		if err != nil || rec.CreateRevision != ev.KV.CreateRevision || rec.ModRevision != ev.KV.ModRevision || rec.Version != ev.KV.Version || len(rec.Value) != len(ev.KV.Value) {
			t.Fatalf("record %+v decoded as %+v, %v", ev.KV, rec, err)
		}
	}
}
