package auditchain

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Record is one entry of the audit log. Its JSON encoding, fields in this
// order, is its canonical form (Canonical).
type Record struct {
	// Sequence is the record's place in the chain: 1 for the first.
	Sequence int64 `json:"sequence"`
	// Time is when the call ended, RFC 3339 with nanoseconds, UTC.
	Time string `json:"time"`
	// Principal is who called; OnBehalfOf whom they said they acted for.
	Principal  string `json:"principal"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Procedure is the RPC, /pawl.v1.Service/Method.
	Procedure string `json:"procedure"`
	// RequestID is the server's ID of the call; TraceID the trace ID of the
	// call's W3C traceparent header, when it had a valid one.
	RequestID string `json:"request_id"`
	TraceID   string `json:"trace_id,omitempty"`
	// Outcome is OutcomeOK or the Connect code the call failed with
	// ("permission_denied"); Message the error's message.
	Outcome string `json:"outcome"`
	Message string `json:"message,omitempty"`
	// Subject is what the call was about, as far as it said.
	Subject Subject `json:"subject"`
	// PrevHash is the hash of the record before, empty for the first.
	PrevHash string `json:"prev_hash"`
}

// Subject is what a call was about: the fields its request (and its
// answer) name.
type Subject struct {
	ConfigID   string `json:"config_id,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// Key is the key of a Put, Delete or Get; Prefix the prefix of a List
	// or Watch, or the longest prefix common to a transaction's keys.
	Key    string `json:"key,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	// Digest is a validator's digest, or a release's content digest.
	Digest string `json:"digest,omitempty"`
	// Identity is an instance's workload identity.
	Identity string `json:"identity,omitempty"`
	// Revision is the store revision a KV mutation made.
	Revision int64 `json:"revision,omitempty"`
}

// OutcomeOK is the outcome of a call that succeeded.
const OutcomeOK = "ok"

// MaxMessageBytes bounds the error message a record keeps: enough for
// any message Pawl writes, and a record stays one small line.
const MaxMessageBytes = 1024

// Canonical returns the record's canonical bytes, which its hash covers.
func (r Record) Canonical() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("auditchain: encode a record: %v", err)) // strings and integers always encode
	}
	return b
}

// Hash returns "sha256:" and the lower-case hex of sha256 over canonical.
func Hash(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// FormatTime is how a record writes its time.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Stored is a record as the log holds it: its canonical bytes and the hash
// written beside them, unchecked, so that a reader can check them itself.
type Stored struct {
	// Position is where it is in the log: 1 for the first line or element.
	Position  int64
	Hash      string
	Canonical []byte
}

// Line is how a log keeps a record: the hash, a space, the canonical
// bytes (JSON, which has no raw newline). A file holds one per line.
func Line(hash string, canonical []byte) []byte {
	b := make([]byte, 0, len(hash)+1+len(canonical)+1)
	b = append(b, hash...)
	b = append(b, ' ')
	return append(b, canonical...)
}

// ParseLine splits a line Line wrote, found at position pos; a line
// without a space is all canonical bytes with no hash, which Chain.Next
// reports.
func ParseLine(pos int64, b []byte) Stored {
	hash, canonical, ok := bytes.Cut(b, []byte{' '})
	if !ok {
		return Stored{Position: pos, Canonical: bytes.Clone(b)}
	}
	return Stored{Position: pos, Hash: string(hash), Canonical: bytes.Clone(canonical)}
}

// Decode reads canonical bytes back into a record.
func Decode(canonical []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(canonical, &r); err != nil {
		return Record{}, fmt.Errorf("auditchain: not a record: %w", err)
	}
	return r, nil
}

// ErrBroken means the chain does not hold: a record was changed, removed,
// inserted or moved.
var ErrBroken = errors.New("auditchain: the chain is broken")

// Chain checks records one after another, from the first of the log or
// from a known head.
type Chain struct {
	// Sequence and Hash are those of the last record checked (0 and ""
	// before the first of the log).
	Sequence int64
	Hash     string
}

// Next checks that s follows the chain and moves the chain to it. The
// error, wrapping ErrBroken, names the record (its position and the
// sequence it should have) and what does not hold.
func (c *Chain) Next(s Stored) error {
	want := c.Sequence + 1
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w at position %d (sequence %d expected): %s", ErrBroken, s.Position, want, fmt.Sprintf(format, args...))
	}
	if got := Hash(s.Canonical); got != s.Hash {
		return bad("its bytes hash to %s, and the log says %q: the record was changed", got, s.Hash)
	}
	r, err := Decode(s.Canonical)
	if err != nil {
		return bad("%v", err)
	}
	if r.PrevHash != c.Hash {
		return bad("it names %q as the record before it, and the record before is %q: a record was removed, inserted or moved", r.PrevHash, c.Hash)
	}
	if r.Sequence != want {
		return bad("its sequence is %d", r.Sequence)
	}
	c.Sequence, c.Hash = r.Sequence, s.Hash
	return nil
}

// Scan reads a log file's lines from r, in order, and calls fn with each
// (its position counting from 1). A last line without its newline is
// passed too: it is what a torn write leaves, and a log that was opened
// again since would have removed it.
func Scan(r io.Reader, fn func(Stored) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for pos := int64(1); ; pos++ {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			if ferr := fn(ParseLine(pos, bytes.TrimSuffix(b, []byte{'\n'}))); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("auditchain: read line %d: %w", pos, err)
		}
	}
}
