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
// before the entry (appendEvent), and the applier cuts the keys and values
// of a transaction from one buffer sized by the same lengths, so a length
// that is not its encoding's would corrupt the log. Checked on the edges
// of every varint (0, each 7-bit step, the largest values, negative and
// zero times) and on random events, with keys and values of any length.
func TestTheLengthsAreThoseOfTheEncodings(t *testing.T) {
	edges := []int64{0, 1, 127, 128, 16383, 16384, 1<<21 - 1, 1 << 21, 1<<56 - 1, 1 << 56, math.MaxInt64}
	times := []time.Time{{}, time.Unix(0, 0), time.Unix(0, -1), time.Unix(0, 63), time.Unix(0, 64), time.Unix(0, -65), time.Now(), time.Unix(0, math.MaxInt64), time.Unix(0, math.MinInt64)}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vs []int64) int64 {
		if rng.IntN(4) == 0 {
			return rng.Int64()
		}
		return vs[rng.IntN(len(vs))]
	}
	for i := range 5000 {
		ev := store.Event{
			Type: store.EventType(rng.IntN(2)), More: rng.IntN(2) == 0, Time: times[rng.IntN(len(times))],
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
		if err != nil || back.Type != ev.Type || back.More != ev.More || back.KV.Key != ev.KV.Key || back.PrevRevision != ev.PrevRevision || !back.Time.Equal(time.Unix(0, ev.Time.UnixNano())) {
			t.Fatalf("event %+v decoded as %+v, %v", ev, back, err)
		}
	}
}
