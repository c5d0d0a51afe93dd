package audit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/sdk/auditchain"
	"github.com/pawlcfg/pawl/server/internal/audit"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashHelperEnv); dir != "" {
		crashHelper(dir) // never returns
	}
	goleak.VerifyTestMain(m)
}

// engine opens a log; calling open again opens the same log anew (a
// restart, or another replica).
type engine struct {
	name string
	open func(t *testing.T) audit.Log
}

func engines(t *testing.T) []engine {
	dir := t.TempDir()
	path := filepath.Join(dir, audit.FileName)
	return []engine{
		{"file", func(t *testing.T) audit.Log {
			l, err := audit.OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{"redis", func() func(t *testing.T) audit.Log {
			var prefix string
			return func(t *testing.T) audit.Log {
				rdb, p := redistest.Shared(t) // deletes p when the test ends
				if prefix == "" {
					prefix = p
				}
				l, err := audit.OpenRedis(context.Background(), rdb, prefix)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
		}()},
	}
}

func record(i int) auditchain.Record {
	outcome := auditchain.OutcomeOK
	if i%3 == 0 {
		outcome = "permission_denied"
	}
	return auditchain.Record{
		Time:      auditchain.FormatTime(time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)),
		Principal: fmt.Sprintf("p%d", i%2), Procedure: "/pawl.v1.KVService/Put", RequestID: audit.NewRequestID(),
		Outcome: outcome, Subject: auditchain.Subject{ConfigID: fmt.Sprintf("c%d", i%5), Key: fmt.Sprintf("/k/%d", i)},
	}
}

// readAll reads every record of l and checks the chain.
func readAll(t *testing.T, l audit.Log) []auditchain.Stored {
	t.Helper()
	var all []auditchain.Stored
	var c audit.Cursor
	var chain auditchain.Chain
	for {
		page, err := l.Read(context.Background(), c, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return all
		}
		for _, e := range page {
			if err := chain.Next(e.Stored); err != nil {
				t.Fatal(err)
			}
			all, c = append(all, e.Stored), e.Next
		}
	}
}

// TestConformance is what both engines promise: concurrent appends build
// one chain with every record once, in sequence; a reopened log continues
// it; List filters and pages; a closed log refuses appends.
func TestConformance(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			l := e.open(t)
			const n = 60
			got := make([]auditchain.Record, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					r, err := l.Append(ctx, record(i))
					if err != nil {
						t.Error(err)
					}
					got[i] = r
				})
			}
			wg.Wait()
			all := readAll(t, l)
			if len(all) != n {
				t.Fatalf("%d records, want %d", len(all), n)
			}
			for i, r := range got {
				s := all[r.Sequence-1]
				if string(s.Canonical) != string(r.Canonical()) || s.Position != r.Sequence {
					t.Errorf("append %d returned sequence %d, and the log holds another record there", i, r.Sequence)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(ctx, record(0)); !errors.Is(err, audit.ErrClosed) {
				t.Errorf("append after Close: %v, want ErrClosed", err)
			}

			l = e.open(t)
			defer l.Close()
			r, err := l.Append(ctx, record(n))
			if err != nil {
				t.Fatal(err)
			}
			if all = readAll(t, l); r.Sequence != n+1 || len(all) != n+1 {
				t.Fatalf("after reopening: sequence %d of %d records, want %d", r.Sequence, len(all), n+1)
			}

			t.Run("list", func(t *testing.T) {
				for _, tc := range []struct {
					q    audit.Query
					want func(auditchain.Record) bool
				}{
					{audit.Query{Principal: "p1"}, func(r auditchain.Record) bool { return r.Principal == "p1" }},
					{audit.Query{ConfigID: "c2"}, func(r auditchain.Record) bool { return r.Subject.ConfigID == "c2" }},
					{audit.Query{Outcome: audit.OutcomeRefused}, func(r auditchain.Record) bool { return r.Outcome == "permission_denied" }},
					{audit.Query{Outcome: auditchain.OutcomeOK, ConfigID: "c1"}, func(r auditchain.Record) bool {
						return r.Outcome == auditchain.OutcomeOK && r.Subject.ConfigID == "c1"
					}},
					{audit.Query{Since: time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC), Until: time.Date(2026, 1, 1, 0, 0, 19, 0, time.UTC)},
						func(r auditchain.Record) bool {
							return r.Time >= "2026-01-01T00:00:10Z" && r.Time <= "2026-01-01T00:00:19Z"
						}},
				} {
					var want []int64
					for _, s := range all {
						if r, _ := auditchain.Decode(s.Canonical); tc.want(r) {
							want = append(want, s.Position)
						}
					}
					var listed []int64
					q := tc.q
					q.Limit = 4
					for {
						page, next, done, err := audit.List(ctx, l, q)
						if err != nil {
							t.Fatal(err)
						}
						for _, s := range page {
							listed = append(listed, s.Position)
						}
						if done {
							break
						}
						q.After = next
					}
					if fmt.Sprint(listed) != fmt.Sprint(want) {
						t.Errorf("%+v listed %v, want %v", tc.q, listed, want)
					}
				}
			})

			t.Run("bad cursor", func(t *testing.T) {
				bad := audit.Cursor{Position: -1}
				if e.name == "file" {
					bad = audit.Cursor{Position: 1, Offset: 3} // inside the first line
				}
				if _, err := l.Read(ctx, bad, 10); !errors.Is(err, audit.ErrCursor) {
					t.Errorf("read from %+v: %v, want ErrCursor", bad, err)
				}
				if _, err := audit.DecodeCursor("not a cursor"); !errors.Is(err, audit.ErrCursor) {
					t.Errorf("DecodeCursor: %v", err)
				}
				c := audit.Cursor{Position: 12, Offset: 3456}
				if back, err := audit.DecodeCursor(c.Encode()); err != nil || back != c {
					t.Errorf("DecodeCursor(Encode(%+v)) = %+v, %v", c, back, err)
				}
			})
		})
	}
}

// TestRedisReplicasBuildOneChain: two replicas (two clients, two logs)
// appending at once build one chain, every record in it once.
func TestRedisReplicasBuildOneChain(t *testing.T) {
	rdb, prefix := redistest.Shared(t)
	ctx := context.Background()
	var logs []audit.Log
	for range 2 {
		own, _ := redistest.Shared(t) // a client of its own for each replica
		l, err := audit.OpenRedis(ctx, own, prefix)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		logs = append(logs, l)
	}
	const per = 150
	seen := sync.Map{}
	var wg sync.WaitGroup
	for i := range 2 * per {
		wg.Go(func() {
			r, err := logs[i%2].Append(ctx, record(i))
			if err != nil {
				t.Error(err)
				return
			}
			if _, dup := seen.LoadOrStore(r.Sequence, i); dup {
				t.Errorf("sequence %d returned twice", r.Sequence)
			}
		})
	}
	wg.Wait()
	reader, err := audit.OpenRedis(ctx, rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if all := readAll(t, reader); len(all) != 2*per {
		t.Fatalf("%d records, want %d", len(all), 2*per)
	}
}

// TestFileTornTail: a crash in the middle of a write leaves part of a
// line; OpenFile cuts it off and the chain goes on from the last whole
// record.
func TestFileTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), audit.FileName)
	ctx := context.Background()
	l, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := l.Append(ctx, record(i)); err != nil {
			t.Fatal(err)
		}
	}
	_ = l.Close()
	torn := auditchain.Line("sha256:00", record(9).Canonical())
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write(torn[:len(torn)/2])
	_ = f.Close()

	l, err = audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Truncated() != int64(len(torn)/2) {
		t.Errorf("truncated %d bytes, want %d", l.Truncated(), len(torn)/2)
	}
	r, err := l.Append(ctx, record(4))
	if err != nil {
		t.Fatal(err)
	}
	if all := readAll(t, l); r.Sequence != 4 || len(all) != 4 {
		t.Errorf("sequence %d of %d records, want 4 of 4", r.Sequence, len(all))
	}
}

// TestFileEditedTailRefused: a last record that does not match its hash
// is not chained onto: OpenFile refuses the file.
func TestFileEditedTailRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), audit.FileName)
	l, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), record(1)); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	b, _ := os.ReadFile(path)
	b[len(b)-5] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := audit.OpenFile(path); err == nil {
		_ = l.Close()
		t.Fatal("OpenFile accepted a log whose last record was edited")
	}
}
