package auditchain_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/sdk/auditchain"
)

// build chains n records as a log would write them.
func build(n int) []auditchain.Stored {
	var out []auditchain.Stored
	prev := ""
	for i := 1; i <= n; i++ {
		r := auditchain.Record{Sequence: int64(i), Time: "2026-01-01T00:00:00Z", Principal: "alice", Procedure: "/pawl.v1.KVService/Put",
			RequestID: fmt.Sprintf("req-%d", i), Outcome: auditchain.OutcomeOK, Subject: auditchain.Subject{Key: fmt.Sprintf("/k/%d", i)}, PrevHash: prev}
		c := r.Canonical()
		prev = auditchain.Hash(c)
		out = append(out, auditchain.Stored{Position: int64(i), Hash: prev, Canonical: c})
	}
	return out
}

// rewrite edits a record's fields and gives it the hash of its new bytes,
// as someone who can write the log would, to hide the edit from the hash
// check.
func rewrite(s auditchain.Stored, edit func(*auditchain.Record)) auditchain.Stored {
	r, _ := auditchain.Decode(s.Canonical)
	edit(&r)
	s.Canonical = r.Canonical()
	s.Hash = auditchain.Hash(s.Canonical)
	return s
}

// TestChainFindsEveryEdit: each way of editing a log breaks the chain at
// the first record edited, and each check (hash, previous hash, sequence)
// is what finds one of them.
func TestChainFindsEveryEdit(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func([]auditchain.Stored) []auditchain.Stored
		want string
	}{
		{"intact", func(l []auditchain.Stored) []auditchain.Stored { return l }, ""},
		{"a byte changed", func(l []auditchain.Stored) []auditchain.Stored {
			l[2].Canonical = bytes.Replace(l[2].Canonical, []byte("alice"), []byte("alicf"), 1)
			return l
		}, "at position 3 (sequence 3 expected): its bytes hash to"},
		{"a record removed, the next renumbered and rehashed", func(l []auditchain.Stored) []auditchain.Stored {
			l = append(l[:2], l[3:]...)
			l[2] = rewrite(l[2], func(r *auditchain.Record) { r.Sequence = 3 })
			return l
		}, "at position 3 (sequence 3 expected): it names"},
		{"a sequence rewritten and rehashed", func(l []auditchain.Stored) []auditchain.Stored {
			l[2] = rewrite(l[2], func(r *auditchain.Record) { r.Sequence = 9 })
			return l
		}, "at position 3 (sequence 3 expected): its sequence is 9"},
		{"two swapped", func(l []auditchain.Stored) []auditchain.Stored { l[1], l[2] = l[2], l[1]; return l }, "at position 2 (sequence 2 expected): it names"},
		{"not a record", func(l []auditchain.Stored) []auditchain.Stored {
			l[0].Canonical = []byte("{")
			l[0].Hash = auditchain.Hash(l[0].Canonical)
			return l
		}, "at position 1 (sequence 1 expected): auditchain: not a record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := tc.edit(build(5))
			var c auditchain.Chain
			var err error
			for i, s := range log {
				s.Position = int64(i + 1)
				if err = c.Next(s); err != nil {
					break
				}
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (!errors.Is(err, auditchain.ErrBroken) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%v, want an ErrBroken saying %q", err, tc.want)
			}
		})
	}
}

// TestScanReadsLines: Scan passes every line of a log file, a torn last
// one included, with its position.
func TestScanReadsLines(t *testing.T) {
	var buf bytes.Buffer
	for _, s := range build(3) {
		buf.Write(auditchain.Line(s.Hash, s.Canonical))
		buf.WriteByte('\n')
	}
	buf.WriteString("sha256:torn {")
	var got []string
	err := auditchain.Scan(&buf, func(s auditchain.Stored) error {
		got = append(got, fmt.Sprintf("%d:%s", s.Position, s.Canonical[:1]))
		return nil
	})
	if err != nil || strings.Join(got, " ") != "1:{ 2:{ 3:{ 4:{" {
		t.Fatalf("Scan = %v, %v", got, err)
	}
}
