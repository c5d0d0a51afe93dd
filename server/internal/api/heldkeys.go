package api

import (
	"encoding/binary"
	"sync"
	"unique"
)

// heldKeys is what an assignment stream sent its instance: per config, a
// key of its assignments (assignmentsKey, never 0). The zero value holds
// nothing.
//
// It is one string, the entries in config order, interned: the streams
// that hold the same keys share one copy. A fleet's instances mostly hold
// the same assignments (those of the same stages), and a map per stream
// took 3.8 KB with 100 configs, 38 MB with 10,000 instances; a stream now
// keeps a handle of 8 bytes. The strings no stream holds are collected.
type heldKeys struct {
	h unique.Handle[string]
}

// heldEntry is one config's key in a heldKeys.
type heldEntry struct {
	config string
	key    uint64
}

// cursor returns a cursor at h's first entry.
func (h heldKeys) cursor() heldCursor {
	if h == (heldKeys{}) {
		return heldCursor{}
	}
	return heldCursor{rest: h.h.Value()}
}

// heldCursor walks a heldKeys' entries in config order.
type heldCursor struct{ rest string }

// next returns the next entry, or false past the last.
func (c *heldCursor) next() (heldEntry, bool) {
	if c.rest == "" {
		return heldEntry{}, false
	}
	var e heldEntry
	e, c.rest = decodeHeldEntry(c.rest)
	return e, true
}

// withChanges is h with each config of changes set to its key, or
// dropped for key 0. changes must be in config order, each config once.
func (h heldKeys) withChanges(changes []heldEntry) heldKeys {
	buf := heldEncodings.Get().(*[]byte)
	defer heldEncodings.Put(buf)
	enc := (*buf)[:0]
	defer func() { *buf = enc[:0] }()
	old := h.cursor()
	i := 0
	for e, ok := old.next(); ok; e, ok = old.next() {
		for ; i < len(changes) && changes[i].config < e.config; i++ {
			enc = appendHeldEntry(enc, changes[i])
		}
		if i < len(changes) && changes[i].config == e.config {
			e = changes[i]
			i++
		}
		enc = appendHeldEntry(enc, e)
	}
	for ; i < len(changes); i++ {
		enc = appendHeldEntry(enc, changes[i])
	}
	if len(enc) == 0 {
		return heldKeys{}
	}
	return heldKeys{unique.Make(string(enc))}
}

// heldEncodings are buffers for withChanges' encoding, which it copies
// into the string it makes (10,000 streams make one each when a
// promotion reaches them).
var heldEncodings = sync.Pool{New: func() any { return new([]byte) }}

// appendHeldEntry appends e's encoding (its config's length, the config,
// the key), or nothing for key 0.
func appendHeldEntry(enc []byte, e heldEntry) []byte {
	if e.key == 0 {
		return enc
	}
	enc = binary.AppendUvarint(enc, uint64(len(e.config)))
	enc = append(enc, e.config...)
	return binary.LittleEndian.AppendUint64(enc, e.key)
}

// decodeHeldEntry decodes the first entry of enc, which appendHeldEntry
// wrote, and returns it with the rest.
func decodeHeldEntry(enc string) (heldEntry, string) {
	n, size := uvarintString(enc)
	enc = enc[size:]
	config := enc[:n]
	enc = enc[n:]
	var key uint64
	for i := 7; i >= 0; i-- {
		key = key<<8 | uint64(enc[i])
	}
	return heldEntry{config: config, key: key}, enc[8:]
}

// uvarintString is binary.Uvarint of a string, which appendHeldEntry
// wrote (so it is well formed).
func uvarintString(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < 0x80 {
			return x | uint64(b)<<shift, i + 1
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return x, len(s)
}
