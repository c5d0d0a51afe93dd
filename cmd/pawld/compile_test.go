package main_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/wasmgen"
	"github.com/pawlcfg/pawl/validators/host"
)

// TestCompileIsStoppedAtOnce uploads the costliest module the limits allow
// (seconds to compile, in one function wazero cannot stop within) to pawld
// with a 2s compile timeout: the compile process pawld runs is killed at
// the timeout, and when a second upload's client goes; pawld is left
// without children and accepts a small module.
func TestCompileIsStoppedAtOnce(t *testing.T) {
	const timeout = 2 * time.Second
	p := startPawldWith(t, "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--validator-compile-timeout", timeout.String())
	vs := pawlv1connect.NewValidatorServiceClient(http.DefaultClient, "http://"+p.addr)
	slow := func(tag string) []byte {
		return wasmgen.WithCustom(wasmgen.Branchy(wasmgen.NestedIfs, 8, host.DefaultModuleLimits.Blocks), tag)
	}

	began := time.Now()
	_, err := vs.Upload(context.Background(), connect.NewRequest(&pawlv1.UploadRequest{Wasm: slow("timeout")}))
	took := time.Since(began)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--validator-compile-timeout") {
		t.Fatalf("Upload = %v; want resource_exhausted for the compile timeout", err)
	}
	t.Logf("upload refused %s after the %s timeout", took-timeout, timeout)
	if took > timeout+3*time.Second {
		t.Fatalf("the upload took %s with a %s timeout", took, timeout)
	}
	if kids := children(t, p.cmd.Process.Pid); len(kids) != 0 {
		t.Fatalf("pawld has children %v after the timeout", kids)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: slow("cancel")}))
		done <- err
	}()
	var kid int
	awaitChildren(t, p.cmd.Process.Pid, func(kids []int) bool {
		if len(kids) == 1 {
			kid = kids[0]
		}
		return len(kids) == 1
	})
	cancel()
	if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("Upload after its cancel = %v", err)
	}
	gone := awaitChildren(t, p.cmd.Process.Pid, func(kids []int) bool { return len(kids) == 0 })
	t.Logf("compile process %d gone %s after the client went", kid, gone)
	if gone > 3*time.Second {
		t.Fatalf("the compile process ran on for %s after the client went", gone)
	}

	small := wasmgen.WithCustom(wasmgen.Bomb(2, 2), "small")
	if _, err := vs.Upload(context.Background(), connect.NewRequest(&pawlv1.UploadRequest{Wasm: small})); err != nil {
		t.Fatalf("Upload of a small module after the stops: %v", err)
	}
}

// children returns the pids of the processes whose parent is pid, zombies
// included, from /proc.
func children(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			kid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			kids = append(kids, kid)
		}
	}
	return kids
}

// awaitChildren polls pid's children until ok holds, for at most a minute,
// and returns how long it took.
func awaitChildren(t *testing.T, pid int, ok func([]int) bool) time.Duration {
	t.Helper()
	began := time.Now()
	for !ok(children(t, pid)) {
		if time.Since(began) > time.Minute {
			t.Fatalf("after a minute, pawld's children are %v", children(t, pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(began)
}
