package main

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
)

// awaitRegistered reads the records watch until the instance's
// registration passes: a release freezes only instances registered before
// it.
func awaitRegistered(t *testing.T, records *connect.ServerStreamForClient[pawlv1.WatchResponse], id string) {
	t.Helper()
	for {
		if !records.Receive() {
			t.Fatal(records.Err())
		}
		for _, ev := range records.Msg().GetEvents().GetEvents() {
			if strings.HasPrefix(ev.GetKv().GetKey(), "/_pawl/instances/"+id) {
				return
			}
		}
	}
}

// createRelease cuts a release of config with the routing validator, one
// stage taking every instance.
func createRelease(t *testing.T, ctx context.Context, rs pawlv1connect.ReleaseServiceClient, config, digest string, content []byte) {
	t.Helper()
	if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: config, MediaType: "application/json", ValidatorDigest: digest, Content: content,
		Stages:   []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		Deadline: durationpb.New(time.Hour),
	}})); err != nil {
		t.Fatal(err)
	}
}

// filesUnder lists every file (not directory) under dir, relative to it.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConfigsAndKeysLiveApart: configs go to DIR/configs/, keys to
// DIR/kv/, so a config named "kv" is a file beside the keys, not in their
// way; --prefix /flags mirrors /flags/... and never /flagsx/...; a key
// whose last element is 255 bytes is written; --file-mode sets every
// file's mode, and its directories get it with search bits.
func TestConfigsAndKeysLiveApart(t *testing.T) {
	srv, ctx, client, digest, records := startWatchingRecords(t)
	kv := pawlv1connect.NewKVServiceClient(client, srv.URL)
	long := strings.Repeat("n", 255)
	for key, value := range map[string]string{"/flags/a": "1", "/flagsx/b": "2", "/flags/deep/" + long: "3"} {
		if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)})); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	lines := runAgent(t, "--server", srv.URL, "--identity", "agent-1", "--dir", dir, "--prefix", "/flags", "--file-mode", "0640",
		"--validator-timeout", "30s")
	await(t, lines, "mirrored 2 keys under /flags/ ")
	awaitRegistered(t, records, "agent-1")
	content := []byte(`{"upstreams":[{"host":"a","weight":100}]}`)
	createRelease(t, ctx, pawlv1connect.NewReleaseServiceClient(client, srv.URL), "kv", digest, content)
	await(t, lines, "wrote kv generation 1 to "+filepath.Join(dir, "configs", "kv"))

	want := map[string]string{"configs/kv": string(content), "kv/a": "1", "kv/deep/" + long: "3"}
	got := filesUnder(t, dir)
	if len(got) != len(want) {
		t.Fatalf("DIR holds %q; want %d files", got, len(want))
	}
	for rel, value := range want {
		path := filepath.Join(dir, filepath.FromSlash(rel))
		b, err := os.ReadFile(path)
		if err != nil || string(b) != value {
			t.Fatalf("%s = %.40q, %v", rel, b, err)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
			t.Errorf("%s has mode %v, want 0640", rel, fi.Mode().Perm())
		}
	}
	for _, d := range []string{"configs", "kv", "kv/deep"} {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || fi.Mode().Perm() != 0o750 {
			t.Errorf("directory %s: %v, %v; want mode 0750", d, fi, err)
		}
	}
}

// TestAPlantedSymlinkLeadsNowhere: once the agent runs, a subdirectory of
// DIR/kv/ is replaced by a symbolic link to a directory outside; a key
// written under it and a key deleted under it neither write nor remove
// anything there, and the agent goes on with the next key.
func TestAPlantedSymlinkLeadsNowhere(t *testing.T) {
	srv, ctx, client, _, _ := startWatchingRecords(t)
	kv := pawlv1connect.NewKVServiceClient(client, srv.URL)
	put := func(key, value string) {
		if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)})); err != nil {
			t.Fatal(err)
		}
	}
	put("/flags/sub/victim", "v")
	dir, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("not the agent's"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := runAgent(t, "--server", srv.URL, "--no-assignments", "--prefix", "/flags/", "--dir", dir)
	await(t, lines, "mirrored 1 keys under /flags/")
	sub := filepath.Join(dir, "kv", "sub")
	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, sub); err != nil {
		t.Fatal(err)
	}
	put("/flags/sub/planted", "escape")
	if _, err := kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: "/flags/sub/victim"})); err != nil {
		t.Fatal(err)
	}
	// The agent writes changes one at a time in revision order: once the
	// next key is written, the two above were handled.
	put("/flags/after", "1")
	await(t, lines, "wrote /flags/after ")
	if got := filesUnder(t, outside); len(got) != 1 || got[0] != "victim" {
		t.Fatalf("outside DIR after the planted link: %q; want only the victim, untouched", got)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "not the agent's" {
		t.Fatalf("victim = %q, %v", b, err)
	}
}

// TestAManInTheMiddleCannotRenameAConfigOutOfTheDirectory: on a plain
// http:// link, a proxy renames config "routing" to "../../../escape" in
// every answer (and back in every request, so the server plays along).
// The agent refuses the assignment: nothing is written outside DIR and
// its cache.
func TestAManInTheMiddleCannotRenameAConfigOutOfTheDirectory(t *testing.T) {
	srv, ctx, client, digest, records := startWatchingRecords(t)
	const fake = "../../../escape"
	mitm := faultproxy.NewRewriter(t, srv.URL, faultproxy.Rename("routing", fake))
	base := t.TempDir()
	dir, cache := filepath.Join(base, "a", "b", "c", "out"), filepath.Join(base, "a", "b", "c", "cache")
	lines := runAgent(t, "--server", mitm.URL, "--identity", "agent-1", "--dir", dir, "--cache-dir", cache, "--validator-timeout", "30s")
	awaitRegistered(t, records, "agent-1")
	createRelease(t, ctx, pawlv1connect.NewReleaseServiceClient(client, srv.URL), "routing", digest, []byte(`{"upstreams":[{"host":"a","weight":100}]}`))
	line := awaitAny(t, lines, "refused an assignment", "wrote ")
	for _, f := range filesUnder(t, base) {
		if !strings.HasPrefix(f, filepath.Join("a", "b", "c", "out")+"/") && !strings.HasPrefix(f, filepath.Join("a", "b", "c", "cache")+"/") {
			t.Errorf("written outside DIR and the cache: %s", f)
		}
	}
	if !strings.Contains(line, "refused an assignment") || !strings.Contains(line, "escape") {
		t.Fatalf("the agent said %q; want its refusal of the renamed config", line)
	}
}

// keyFileCases are keys under "/flags/" and the file each maps to ("" for
// refused); FuzzKeyFile starts from them.
var keyFileCases = []struct{ key, file string }{
	{"/flags/a", "kv/a"},
	{"/flags/checkout/new-ui", "kv/checkout/new-ui"},
	{"/flags/etc/passwd", "kv/etc/passwd"},
	{"/flags//etc/passwd", ""}, // would be the file above
	{"/flags/a/", ""},          // would be kv/a
	{"/flags/", ""},
	{"/flagsx/b", ""},
	{"/other/a", ""},
	{"/flags/..", ""},
	{"/flags/a/../../..", ""},
	{"/flags/./a", ""},
	{"/flags/a\x00b", ""},
	{"/flags/.atomicfile-0123456789abcdef", ""},
	{"/flags/.hidden", "kv/.hidden"},
	{"/flags/" + strings.Repeat("n", 255), "kv/" + strings.Repeat("n", 255)},
	{"/flags/" + strings.Repeat("n", 256), ""},
	{"/flags/a\\..\\..", "kv/a\\..\\.."},
}

func TestKeyFile(t *testing.T) {
	for _, c := range keyFileCases {
		got, ok := keyFile("/flags/", c.key)
		if got != c.file || ok != (c.file != "") {
			t.Errorf("keyFile(%q) = %q, %v; want %q", c.key, got, ok, c.file)
		}
	}
	if _, ok := keyFile("/flags", "/flagsx/b"); ok {
		t.Error("a prefix without its trailing / maps keys beside it")
	}
}

// FuzzKeyFile: whatever two keys it is given, a file keyFile maps a key to
// is inside DIR/kv/ (never outside, whatever the OS's separators), and two
// distinct keys never map to one file.
func FuzzKeyFile(f *testing.F) {
	for i, c := range keyFileCases {
		f.Add("/flags/", c.key, keyFileCases[(i+1)%len(keyFileCases)].key)
	}
	f.Add("/", "/a//b", "/a/b")
	f.Fuzz(func(t *testing.T, prefix, k1, k2 string) {
		f1, ok1 := keyFile(prefix, k1)
		f2, ok2 := keyFile(prefix, k2)
		for _, c := range []struct {
			key, file string
			ok        bool
		}{{k1, f1, ok1}, {k2, f2, ok2}} {
			if !c.ok {
				continue
			}
			rel, ok := strings.CutPrefix(c.file, kvDir+"/")
			if !ok || !filepath.IsLocal(filepath.FromSlash(rel)) || !filepath.IsLocal(filepath.FromSlash(c.file)) || filepath.Clean(filepath.FromSlash(c.file)) != filepath.FromSlash(c.file) {
				t.Fatalf("keyFile(%q, %q) = %q: not a clean path inside kv/", prefix, c.key, c.file)
			}
		}
		if ok1 && ok2 && k1 != k2 && f1 == f2 {
			t.Fatalf("keys %q and %q both map to %q", k1, k2, f1)
		}
	})
}

func TestFileFlagsUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--dir", dir, "--identity", "x", "--file-mode", "644x"},
		{"--dir", dir, "--identity", "x", "--file-mode", "0400"},  // the agent could not replace its files
		{"--dir", dir, "--identity", "x", "--file-mode", "01644"}, // not permission bits
		{"--dir", dir, "--identity", "x", "--cache-dir", filepath.Join(dir, ".cache")},
		{"--dir", dir, "--identity", "x", "--cache-dir", dir},
		{"--dir", dir, "--identity", "x", "--config", "../etc"},
		{"--dir", dir, "--identity", "x", "--download-attempts", "0"},
	} {
		var stderr strings.Builder
		if code := run(context.Background(), args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--") {
			t.Errorf("%q: exit %d, %q", args, code, stderr.String())
		}
	}
}

// TestCacheDirInsideDirThroughSymlinksRefused: a --cache-dir that is
// --dir, or under it, through a real symbolic link (to the directory, to
// a folder that does not exist yet, a dangling link, or a --dir given by
// a link) is refused as the plain path is; a link that leads elsewhere is
// accepted.
func TestCacheDirInsideDirThroughSymlinksRefused(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "app")
	outside := filepath.Join(base, "cache")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, target string) string {
		p := filepath.Join(base, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	toDir := link("to-app", dir)
	relToDir := link("rel-to-app", "app")
	dangling := link("dangling", filepath.Join(dir, "not-yet", "cache"))
	dirLink := link("dir-link", dir)
	toOutside := link("to-cache", outside)
	for _, c := range []struct{ dir, cache string }{
		{dir, toDir},
		{dir, relToDir},
		{dir, filepath.Join(toDir, ".cache")},
		{dir, filepath.Join(toDir, "a", "b")},
		{dir, dangling},
		{dir, filepath.Join(dangling, "deeper")},
		{dirLink, filepath.Join(dir, ".cache")},
		{dirLink, toDir},
	} {
		_, err := parse([]string{"--dir", c.dir, "--identity", "x", "--cache-dir", c.cache}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "through symbolic links") {
			t.Errorf("--dir %s --cache-dir %s: %v; want a refusal", c.dir, c.cache, err)
		}
	}
	// Dangling links that lead to each other end in an error, not a hang.
	loop := link("loop-a", filepath.Join(base, "loop-b", "x"))
	link("loop-b", filepath.Join(base, "loop-a", "y"))
	if _, err := parse([]string{"--dir", dir, "--identity", "x", "--cache-dir", loop}, io.Discard); err == nil || !strings.Contains(err.Error(), "links") {
		t.Errorf("--cache-dir through a cycle of dangling links: %v", err)
	}
	for _, cache := range []string{toOutside, filepath.Join(toOutside, "new"), filepath.Join(base, "fresh", "cache")} {
		if _, err := parse([]string{"--dir", dir, "--identity", "x", "--cache-dir", cache}, io.Discard); err != nil {
			t.Errorf("--cache-dir %s: %v", cache, err)
		}
	}
}
