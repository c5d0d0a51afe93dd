package main_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/snapshotfile"
)

// TestRestoreCommand: `pawld restore FILE --data DIR` (flags before or
// after FILE) creates a data directory that pawld then serves at the
// snapshot's revision; it refuses a non-empty directory and a damaged
// file, changing nothing.
func TestRestoreCommand(t *testing.T) {
	ctx := context.Background()
	p := startPawld(t, t.TempDir())
	kv := p.client(t)
	for _, key := range []string{"/a", "/b", "/c"} {
		if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(key)})); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	mc := pawlv1connect.NewMaintenanceServiceClient(http.DefaultClient, "http://"+p.addr)
	if _, err := snapshotfile.Save(ctx, mc, p.addr, file, time.Minute); err != nil {
		t.Fatal(err)
	}
	p.stop(t)

	restore := func(args ...string) (string, error) {
		out, err := exec.Command(pawldBinary, append([]string{"restore"}, args...)...).CombinedOutput()
		return string(out), err
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if out, err := restore(file, "--data", dir); err != nil || !strings.Contains(out, "revision 3") {
		t.Fatalf("pawld restore = %v, %q", err, out)
	}
	if out, err := restore("--data", filepath.Join(t.TempDir(), "other"), file); err != nil {
		t.Fatalf("pawld restore --data DIR FILE = %v, %q", err, out)
	}
	out, err := restore(file, "--data", dir)
	if err == nil || !strings.Contains(out, "not empty") {
		t.Fatalf("pawld restore into a non-empty directory = %v, %q", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.db")
	b, _ := os.ReadFile(file)
	b[len(b)/2] ^= 1
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	badDir := filepath.Join(t.TempDir(), "bad")
	if out, err := restore(bad, "--data", badDir); err == nil || !strings.Contains(out, "does not match its checksum") {
		t.Fatalf("pawld restore of a damaged file = %v, %q", err, out)
	}
	if _, err := os.Stat(badDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore created %s", badDir)
	}
	if out, err := restore("--data", dir); err == nil || !strings.Contains(out, "one snapshot file") {
		t.Fatalf("pawld restore without a file = %v, %q", err, out)
	}

	r := startPawld(t, dir)
	resp, err := r.client(t).Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/b"}))
	if err != nil || !bytes.Equal(resp.Msg.GetKv().GetValue(), []byte("/b")) || resp.Msg.GetRevision() != 3 {
		t.Fatalf("restored pawld: get /b = %v, %v", resp, err)
	}
	r.stop(t)
}
