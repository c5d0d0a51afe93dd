package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// TestAuditListsAndFilters: pawl audit prints a line per record, filters
// by outcome, principal and time, and -o json prints the records.
func TestAuditListsAndFilters(t *testing.T) {
	srv := testserver.Start(t)
	expect(t, srv, "revision 1\n", "put", "/app/a", "one")
	if code, _, errOut := pawl(t, srv, "", "put", "/_pawl/forged", "x"); code != 1 || !strings.Contains(errOut, "permission_denied") {
		t.Fatalf("put under /_pawl/ = %d, %q", code, errOut)
	}
	lines := func(args ...string) []string {
		t.Helper()
		code, out, errOut := pawl(t, srv, "", append([]string{"audit"}, args...)...)
		if code != 0 {
			t.Fatalf("pawl audit %v = %d, %q", args, code, errOut)
		}
		return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	}
	all := lines()
	if len(all) != 2 || !strings.HasPrefix(all[0], "1\t") || !strings.Contains(all[0], "\t/pawl.v1.KVService/Put\tok\t") ||
		!strings.HasSuffix(all[0], "\tkey=/app/a revision=1") {
		t.Fatalf("pawl audit = %q", all)
	}
	if got := lines("--outcome", "refused"); len(got) != 1 || !strings.HasPrefix(got[0], "2\t") || !strings.Contains(got[0], "\tpermission_denied (keys under /_pawl/") {
		t.Errorf("pawl audit --outcome refused = %q", got)
	}
	if got := lines("--principal", "nobody"); len(got) != 1 || got[0] != "" {
		t.Errorf("pawl audit --principal nobody = %q", got)
	}
	if got := lines("--since", "1h", "--until", "2999-01-01T00:00:00Z"); len(got) != 2 {
		t.Errorf("pawl audit --since 1h = %q", got)
	}
	if got := lines("--until", "1h"); len(got) != 1 || got[0] != "" {
		t.Errorf("pawl audit --until 1h = %q", got)
	}
	var rec struct {
		Position int64
		Hash     string
		Record   struct{ Principal, Procedure, RequestID string }
	}
	if got := lines("-o", "json", "--outcome", "ok"); len(got) != 1 || json.Unmarshal([]byte(got[0]), &rec) != nil ||
		rec.Position != 1 || !strings.HasPrefix(rec.Hash, "sha256:") || rec.Record.Procedure != "/pawl.v1.KVService/Put" {
		t.Errorf("pawl audit -o json = %q", got)
	}
	for _, bad := range [][]string{{"--since", "yesterday"}, {"--until", "-5m"}} {
		if code, _, _ := pawl(t, srv, "", append([]string{"audit"}, bad...)...); code != 2 {
			t.Errorf("pawl audit %v exits %d, want 2", bad, code)
		}
	}
	if code, _, errOut := pawl(t, srv, "", "audit", "--outcome", "maybe"); code != 1 || !strings.Contains(errOut, "invalid_argument") {
		t.Errorf("pawl audit --outcome maybe = %d, %q", code, errOut)
	}
}

// TestAuditVerifyFindsEdits edits the audit log behind the server's back
// (a byte changed, a record deleted, two records swapped): pawl audit
// verify, against the server and (embedded store) on the file offline,
// fails naming the first bad record; the log as written verifies.
func TestAuditVerifyFindsEdits(t *testing.T) {
	dir := t.TempDir()
	srv := testserver.StartIn(t, dir)
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if code, _, errOut := pawl(t, srv, "", "put", "/app/"+k, k); code != 0 {
			t.Fatal(errOut)
		}
	}
	code, out, errOut := pawl(t, srv, "", "audit", "verify")
	if code != 0 || !strings.HasPrefix(out, "valid: 5 records, head sha256:") {
		t.Fatalf("pawl audit verify = %d, %q, %q", code, out, errOut)
	}

	// read and write the log's lines where the engine keeps them.
	var read func() []string
	var write func([]string)
	path := filepath.Join(dir, "audit.log")
	if srv.RedisPrefix != "" {
		rdb, _ := redistest.Shared(t)
		ctx, key := context.Background(), "{"+srv.RedisPrefix+"}:audit"
		read = func() []string { return rdb.LRange(ctx, key, 0, -1).Val() }
		write = func(lines []string) {
			if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, key)
				p.RPush(ctx, key, toAny(lines)...)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		srv.Stop()
		read = func() []string {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		}
		write = func(lines []string) {
			if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		code, out, errOut := pawl(t, srv, "", "audit", "verify", "--file", path)
		if code != 0 || !strings.HasPrefix(out, "valid: 5 records") {
			t.Fatalf("pawl audit verify --file = %d, %q, %q", code, out, errOut)
		}
	}
	orig := read()
	for _, edit := range []struct {
		name string
		fn   func([]string) []string
	}{
		{"a byte changed", func(l []string) []string { l[2] = strings.Replace(l[2], `"/app/c"`, `"/app/C"`, 1); return l }},
		{"a record deleted", func(l []string) []string { return append(l[:2], l[3:]...) }},
		{"two records swapped", func(l []string) []string { l[2], l[3] = l[3], l[2]; return l }},
	} {
		t.Run(edit.name, func(t *testing.T) {
			write(edit.fn(append([]string(nil), orig...)))
			defer write(orig)
			if srv.RedisPrefix == "" {
				code, _, errOut := pawl(t, srv, "", "audit", "verify", "--file", path)
				if code != 1 || !strings.Contains(errOut, "the chain is broken at position 3 (sequence 3 expected)") {
					t.Errorf("pawl audit verify --file = %d, %q", code, errOut)
				}
				running := testserver.StartIn(t, dir) // the last record is intact: the server opens the log
				defer running.Stop()
				srv = running
			}
			code, _, errOut := pawl(t, srv, "", "audit", "verify")
			if code != 1 || !strings.Contains(errOut, "the chain is broken at position 3 (sequence 3 expected)") {
				t.Errorf("pawl audit verify = %d, %q", code, errOut)
			}
		})
	}
}

func toAny(lines []string) []any {
	out := make([]any, len(lines))
	for i, l := range lines {
		out[i] = l
	}
	return out
}
