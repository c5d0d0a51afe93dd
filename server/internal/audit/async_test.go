package audit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pawlcfg/pawl/sdk/auditchain"
	"github.com/pawlcfg/pawl/server/internal/audit"
)

// TestAppendAsync is what both engines promise of AppendAsync: appends
// queued by one caller, without waiting, are chained in the order queued;
// each done is called once, when its record is in the log (readable:
// durable); a closed log and an ended context refuse at once.
func TestAppendAsync(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			l := e.open(t)
			const n = 300 // more than one batch (DefaultMaxBatch)
			type answer struct {
				i, readable int // readable: the records the log held when done was called
				rec         auditchain.Record
				err         error
			}
			answers := make(chan answer, 2*n)
			var sent []auditchain.Record
			for i := range n {
				r := record(i)
				sent = append(sent, r)
				l.AppendAsync(ctx, r, func(rec auditchain.Record, err error) {
					readable := -1
					if e.name == "file" { // reading the file is quick; done must not block
						entries, _ := l.Read(ctx, audit.Cursor{}, n)
						readable = len(entries)
					}
					answers <- answer{i, readable, rec, err}
				})
			}
			got := make([]auditchain.Record, n)
			for range n {
				a := <-answers
				if a.err != nil {
					t.Fatalf("append %d: %v", a.i, a.err)
				}
				if got[a.i].Sequence != 0 {
					t.Fatalf("append %d answered twice", a.i)
				}
				got[a.i] = a.rec
				if a.readable >= 0 && int64(a.readable) < a.rec.Sequence {
					t.Fatalf("append %d (sequence %d) answered while the log held %d records", a.i, a.rec.Sequence, a.readable)
				}
			}
			all := readAll(t, l)
			if len(all) != n {
				t.Fatalf("%d records, want %d", len(all), n)
			}
			for i, r := range got {
				if r.Sequence != int64(i+1) || r.RequestID != sent[i].RequestID || string(all[i].Canonical) != string(r.Canonical()) {
					t.Fatalf("append %d: sequence %d, want %d, in the order queued", i, r.Sequence, i+1)
				}
			}

			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			var err error
			l.AppendAsync(cancelled, record(0), func(_ auditchain.Record, e error) { err = e })
			if !errors.Is(err, context.Canceled) {
				t.Errorf("append with an ended context: %v, want context.Canceled at once", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			err = nil
			l.AppendAsync(ctx, record(0), func(_ auditchain.Record, e error) { err = e })
			if !errors.Is(err, audit.ErrClosed) {
				t.Errorf("append after Close: %v, want ErrClosed at once", err)
			}
			l = e.open(t)
			defer l.Close()
			if all := readAll(t, l); len(all) != n {
				t.Errorf("%d records after the refused appends, want %d", len(all), n)
			}
		})
	}
}
