package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

var errCorrupt = errors.New("boltstore: corrupt record")

// revKey encodes a revision as a big-endian log key, so that byte order is
// revision order.
func revKey(rev int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(rev))
	return b[:]
}

func decodeRev(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }

// idxKey is key, NUL, big-endian revision.
func idxKey(key string, rev int64) []byte { return appendIdxKey(make([]byte, 0, len(key)+9), key, rev) }

// appendIdxKey appends idxKey(key, rev) to b.
func appendIdxKey(b []byte, key string, rev int64) []byte {
	b = append(b, key...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint64(b, uint64(rev))
}

// splitIdxKey returns the key and revision of an idx entry.
func splitIdxKey(k []byte) (string, int64, bool) {
	if len(k) < 9 || k[len(k)-9] != 0 {
		return "", 0, false
	}
	return string(k[:len(k)-9]), decodeRev(k[len(k)-8:]), true
}

// recordLen is the length of kv's record (appendRecord).
func recordLen(kv store.KeyValue) int {
	return uvarintLen(uint64(kv.CreateRevision)) + uvarintLen(uint64(kv.ModRevision)) + uvarintLen(uint64(kv.Version)) + len(kv.Value)
}

// appendRecord appends to b the current record of a key (the kv bucket
// value).
func appendRecord(b []byte, kv store.KeyValue) []byte {
	b = binary.AppendUvarint(b, uint64(kv.CreateRevision))
	b = binary.AppendUvarint(b, uint64(kv.ModRevision))
	b = binary.AppendUvarint(b, uint64(kv.Version))
	return append(b, kv.Value...)
}

// decodeRecord decodes a kv bucket value, copying the value out of b.
func decodeRecord(key string, b []byte) (store.KeyValue, error) {
	kv := store.KeyValue{Key: key}
	var err error
	var vals [3]uint64
	for i := range vals {
		if vals[i], b, err = uvarint(b); err != nil {
			return store.KeyValue{}, fmt.Errorf("key %q: %w", key, err)
		}
	}
	kv.CreateRevision, kv.ModRevision, kv.Version = int64(vals[0]), int64(vals[1]), int64(vals[2])
	kv.Value = append([]byte{}, b...)
	return kv, nil
}

// moreFlag, in an event's type byte, marks an event that more of its
// transaction follows (store.Event.More). Entries written before it
// existed never have it.
const moreFlag = 0x80

// eventMore reports whether more of its transaction follows the log entry
// b.
func eventMore(b []byte) bool { return len(b) > 0 && b[0]&moreFlag != 0 }

// eventLen is the length of ev's log entry (appendEvent).
func eventLen(ev store.Event) int {
	return 1 + varintLen(ev.Time.UnixNano()) + uvarintLen(uint64(ev.PrevRevision)) + uvarintLen(uint64(ev.KV.CreateRevision)) +
		uvarintLen(uint64(ev.KV.Version)) + uvarintLen(uint64(len(ev.KV.Key))) + len(ev.KV.Key) + len(ev.KV.Value)
}

// uvarintLen is the length of x as binary.AppendUvarint encodes it.
func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// varintLen is the length of x as binary.AppendVarint encodes it.
func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

// appendEvent appends ev's log entry to b.
func appendEvent(b []byte, ev store.Event) []byte {
	typ := byte(ev.Type)
	if ev.More {
		typ |= moreFlag
	}
	b = append(b, typ)
	b = binary.AppendVarint(b, ev.Time.UnixNano())
	b = binary.AppendUvarint(b, uint64(ev.PrevRevision))
	b = binary.AppendUvarint(b, uint64(ev.KV.CreateRevision))
	b = binary.AppendUvarint(b, uint64(ev.KV.Version))
	b = binary.AppendUvarint(b, uint64(len(ev.KV.Key)))
	b = append(b, ev.KV.Key...)
	return append(b, ev.KV.Value...)
}

// decodeEvent decodes the log entry of revision rev, copying out of b.
func decodeEvent(rev int64, b []byte) (store.Event, error) {
	if len(b) < 1 {
		return store.Event{}, fmt.Errorf("revision %d: %w", rev, errCorrupt)
	}
	ev := store.Event{Type: store.EventType(b[0] &^ moreFlag), More: b[0]&moreFlag != 0}
	nanos, n := binary.Varint(b[1:])
	if n <= 0 {
		return store.Event{}, fmt.Errorf("revision %d: %w", rev, errCorrupt)
	}
	b = b[1+n:]
	var vals [4]uint64
	var err error
	for i := range vals {
		if vals[i], b, err = uvarint(b); err != nil {
			return store.Event{}, fmt.Errorf("revision %d: %w", rev, err)
		}
	}
	keyLen := vals[3]
	if uint64(len(b)) < keyLen {
		return store.Event{}, fmt.Errorf("revision %d: %w", rev, errCorrupt)
	}
	ev.Time = time.Unix(0, nanos)
	ev.PrevRevision = int64(vals[0])
	ev.KV = store.KeyValue{
		Key:            string(b[:keyLen]),
		CreateRevision: int64(vals[1]),
		ModRevision:    rev,
		Version:        int64(vals[2]),
	}
	if ev.Type == store.EventPut {
		ev.KV.Value = append([]byte{}, b[keyLen:]...)
	}
	return ev, nil
}

// eventKey reads only the type and key of a log entry.
func eventKey(b []byte) (store.EventType, string, error) {
	if len(b) < 1 {
		return 0, "", errCorrupt
	}
	_, n := binary.Varint(b[1:])
	if n <= 0 {
		return 0, "", errCorrupt
	}
	rest := b[1+n:]
	var keyLen uint64
	var err error
	for range 4 {
		if keyLen, rest, err = uvarint(rest); err != nil {
			return 0, "", err
		}
	}
	if uint64(len(rest)) < keyLen {
		return 0, "", errCorrupt
	}
	return store.EventType(b[0] &^ moreFlag), string(rest[:keyLen]), nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errCorrupt
	}
	return v, b[n:], nil
}
