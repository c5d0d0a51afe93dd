package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/snapshotfile"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// load writes to srv from two goroutines (puts, deletes, transactions)
// until stop is called, and returns how many writes were answered.
func load(t *testing.T, kv pawlv1connect.KVServiceClient) (wrote <-chan int64, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	revs := make(chan int64, 1024)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("/load/w%d/k%02d", w, i%40)
				var rev int64
				var err error
				switch i % 7 {
				case 5:
					var resp *connect.Response[pawlv1.DeleteResponse]
					if resp, err = kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: key})); err == nil {
						rev = resp.Msg.GetRevision()
					}
				case 6:
					var resp *connect.Response[pawlv1.TxnResponse]
					resp, err = kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{
						{Key: key + "/a", Value: []byte(fmt.Sprint(i))},
						{Key: key + "/b", Delete: i%2 == 0},
					}}))
					if err == nil {
						rev = resp.Msg.GetRevision()
					}
				default:
					var resp *connect.Response[pawlv1.PutResponse]
					if resp, err = kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(fmt.Sprintf("w%d-%d", w, i))})); err == nil {
						rev = resp.Msg.GetRevision()
					}
				}
				if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
					if ctx.Err() == nil {
						t.Errorf("load: %v", err)
					}
					return
				}
				select {
				case revs <- rev:
				default:
				}
			}
		}()
	}
	return revs, func() { cancel(); wg.Wait() }
}

// listAll lists every key at revision rev (0: current), page by page.
func listAll(t *testing.T, kv pawlv1connect.KVServiceClient, rev int64) ([]*pawlv1.KeyValue, int64) {
	t.Helper()
	var out []*pawlv1.KeyValue
	token := ""
	for {
		resp, err := kv.List(context.Background(), connect.NewRequest(&pawlv1.ListRequest{Prefix: "/", Revision: rev, PageSize: 500, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.Msg.GetKvs()...)
		if token = resp.Msg.GetNextPageToken(); token == "" {
			return out, resp.Msg.GetRevision()
		}
	}
}

// TestSnapshotSavedUnderLoadRestoresEveryKeyAndRevision: a snapshot
// saved while two writers keep writing, restored into a fresh pawld,
// holds exactly the keys, values and revisions the original had at the
// snapshot's revision, and the same history of changes; the restored
// store's next write takes the next revision.
func TestSnapshotSavedUnderLoadRestoresEveryKeyAndRevision(t *testing.T) {
	srv := testserver.Start(t)
	kv := pawlv1connect.NewKVServiceClient(http.DefaultClient, srv.URL)
	if testserver.Engine() == "redis" {
		code, _, errOut := pawl(t, srv, "", "snapshot", "save", filepath.Join(t.TempDir(), "x.db"))
		if code != 1 || !strings.Contains(errOut, "failed_precondition") || !strings.Contains(errOut, "back up Redis itself") {
			t.Fatalf("snapshot save on Redis = %d, %q; want failed_precondition naming Redis's own backups", code, errOut)
		}
		return
	}
	wrote, stop := load(t, kv)
	defer stop()
	for rev := int64(0); rev < 150; rev = <-wrote {
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	code, out, errOut := pawl(t, srv, "", "snapshot", "save", file, "-o", "json")
	var saved snapshotfile.Saved
	if err := json.Unmarshal([]byte(out), &saved); code != 0 || err != nil {
		t.Fatalf("snapshot save = %d, %q, %q (%v)", code, out, errOut, err)
	}
	// The load goes on past the snapshot before it stops.
	for rev := int64(0); rev < saved.Revision+50; rev = <-wrote {
	}
	stop()
	if saved.Revision < 150 {
		t.Fatalf("saved at revision %d, before the load's 150", saved.Revision)
	}

	dir := filepath.Join(t.TempDir(), "restored")
	restored, err := server.Restore(context.Background(), file, dir)
	if err != nil || restored.Revision != saved.Revision || restored.Incarnation == saved.Incarnation {
		t.Fatalf("restore = %+v, %v; want revision %d and a new incarnation", restored, err, saved.Revision)
	}
	fresh := testserver.StartIn(t, dir)
	fkv := pawlv1connect.NewKVServiceClient(http.DefaultClient, fresh.URL)
	want, _ := listAll(t, kv, saved.Revision)
	got, at := listAll(t, fkv, 0)
	if at != saved.Revision || len(got) != len(want) || len(want) == 0 {
		t.Fatalf("restored store: %d keys at revision %d; the original had %d at %d", len(got), at, len(want), saved.Revision)
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.GetKey() != w.GetKey() || !bytes.Equal(g.GetValue(), w.GetValue()) || g.GetModRevision() != w.GetModRevision() ||
			g.GetCreateRevision() != w.GetCreateRevision() || g.GetVersion() != w.GetVersion() {
			t.Fatalf("restored key %d = %v; the original had %v", i, g, w)
		}
	}
	// The history: every change up to the snapshot's revision, alike.
	if a, b := history(t, kv, saved.Revision), history(t, fkv, saved.Revision); a != b || a == "" {
		t.Fatalf("the restored change log differs from the original's up to revision %d", saved.Revision)
	}
	if rev := put(t, fkv, "/after/restore"); rev != saved.Revision+1 {
		t.Fatalf("first write after the restore took revision %d; want %d", rev, saved.Revision+1)
	}
}

func put(t *testing.T, kv pawlv1connect.KVServiceClient, key string) int64 {
	t.Helper()
	resp, err := kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte("x")}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetRevision()
}

// history returns every change of the change log from revision 1 through
// through, one line each.
func history(t *testing.T, kv pawlv1connect.KVServiceClient, through int64) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/", StartRevision: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var b strings.Builder
	for stream.Receive() {
		m := stream.Msg()
		if m.GetCompacted() != nil {
			t.Fatalf("history compacted: %v", m)
		}
		for _, ev := range m.GetEvents().GetEvents() {
			kv := ev.GetKv()
			fmt.Fprintf(&b, "%v %s %q %d %d %d\n", ev.GetType(), kv.GetKey(), kv.GetValue(), kv.GetModRevision(), kv.GetCreateRevision(), ev.GetPrevRevision())
			if kv.GetModRevision() == through { // every revision is one event under "/"
				return b.String()
			}
		}
	}
	t.Fatalf("history: %v", stream.Err())
	return ""
}

// TestSnapshotSaveRefusesACopyThatDoesNotMatch: a byte flipped on the
// way, or a stream cut in the middle, fails the save with exit 1, and
// leaves neither FILE nor a temporary file.
func TestSnapshotSaveRefusesACopyThatDoesNotMatch(t *testing.T) {
	if testserver.Engine() == "redis" {
		t.Skip("the embedded store's backups")
	}
	srv := testserver.Start(t)
	kv := pawlv1connect.NewKVServiceClient(http.DefaultClient, srv.URL)
	for i := range 50 {
		put(t, kv, fmt.Sprintf("/k/%d", i))
	}
	target, _ := url.Parse(srv.URL)
	flip := httputil.NewSingleHostReverseProxy(target)
	flip.Director = func(r *http.Request) {
		r.URL.Scheme, r.URL.Host = target.Scheme, target.Host
		r.Header.Del("Connect-Accept-Encoding") // plain bytes, so that a flip stays inside a chunk
	}
	flip.ModifyResponse = func(resp *http.Response) error {
		resp.Body = &flipAt{ReadCloser: resp.Body, at: 8000}
		return nil
	}
	flipping := httptest.NewServer(flip)
	defer flipping.Close()
	cutting := faultproxy.NewHolder(t, srv.Addr)
	cutting.CutAfter(2000) // the copy arrives gzipped: a few kB

	for name, server := range map[string]string{"flipped": flipping.URL, "cut": "http://" + cutting.Addr} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "backup.db")
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"--server", server, "snapshot", "save", file}, strings.NewReader(""), &stdout, &stderr)
			if code != 1 {
				t.Fatalf("snapshot save through a %s stream = %d, %q, %q; want 1", name, code, stdout.String(), stderr.String())
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("a refused save left %v", entries)
			}
			t.Log(stderr.String())
		})
	}
	// The same server, directly: the copy is saved.
	code, out, errOut := pawl(t, srv, "", "snapshot", "save", filepath.Join(t.TempDir(), "ok.db"))
	if code != 0 || !strings.Contains(out, "revision 50") {
		t.Fatalf("snapshot save = %d, %q, %q", code, out, errOut)
	}
}

// flipAt flips one bit of the byte at offset at of a body.
type flipAt struct {
	io.ReadCloser
	at, off int64
}

func (f *flipAt) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if i := f.at - f.off; i >= 0 && i < int64(n) {
		p[i] ^= 0x10
	}
	f.off += int64(n)
	return n, err
}

// TestRestoreRefusesADamagedSnapshot: a snapshot file with a byte flipped,
// or cut short, is refused by restore, which creates nothing.
func TestRestoreRefusesADamagedSnapshot(t *testing.T) {
	if testserver.Engine() == "redis" {
		t.Skip("the embedded store's backups")
	}
	srv := testserver.Start(t)
	put(t, pawlv1connect.NewKVServiceClient(http.DefaultClient, srv.URL), "/a")
	file := filepath.Join(t.TempDir(), "backup.db")
	if code, out, errOut := pawl(t, srv, "", "snapshot", "save", file); code != 0 {
		t.Fatalf("snapshot save = %d, %q, %q", code, out, errOut)
	}
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for name, damage := range map[string]func([]byte) []byte{
		"flipped in the data":     func(b []byte) []byte { b[len(b)/3] ^= 1; return b },
		"flipped in the checksum": func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"truncated":               func(b []byte) []byte { return b[:len(b)-4096] },
		"empty":                   func([]byte) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.db")
			if err := os.WriteFile(bad, damage(bytes.Clone(good)), 0o600); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "restored")
			if _, err := server.Restore(context.Background(), bad, dir); !errors.Is(err, server.ErrSnapshotChecksum) {
				t.Fatalf("restore of a damaged snapshot: %v; want ErrSnapshotChecksum", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused restore left %s (%v)", dir, err)
			}
		})
	}
}
