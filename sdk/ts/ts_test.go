// Package ts_test runs the TypeScript client's tests (sdk/ts/test, node's
// own test runner) against a real pawld: it starts the server with
// authentication on, uploads the routing validator, puts a man in the
// middle in front of it that changes every release's content, compiles
// the TypeScript with the pinned tsc (node_modules/.bin/tsc, from npm ci)
// and runs `node --test` with the addresses in the environment.
//
// Without node or node_modules the test skips, unless CI=true, where it
// fails.
package ts_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"), goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		os.Exit(code)
	}))
}

// tests are the compiled test files, run in this order.
var tests = []string{"canonical.test.js", "traceparent.test.js", "kv.test.js", "follow.test.js"}

func TestTypeScriptClient(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	tsc := filepath.Join(root, "node_modules", ".bin", "tsc")
	if _, statErr := os.Stat(tsc); statErr != nil && err == nil {
		err = fmt.Errorf("%w (run npm ci at the repository's root)", statErr)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs node and node_modules: %v", err)
		}
		t.Skipf("skipped without node and node_modules: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Compile while the server starts.
	out := t.TempDir()
	compiled := make(chan error, 1)
	var compileOutput bytes.Buffer
	go func() {
		cmd := exec.CommandContext(ctx, tsc, "-p", "tsconfig.json", "--outDir", out)
		cmd.Dir = filepath.Join(root, "sdk", "ts")
		cmd.Stdout, cmd.Stderr = &compileOutput, &compileOutput
		compiled <- cmd.Run()
	}()

	admin, adminHash := testserver.NewToken(t)
	instance, instanceHash := testserver.NewToken(t)
	auth := testserver.WriteAuthFile(t, "tokens:\n"+
		"  - principal: operator\n    hash: "+adminHash+"\n    grants: [{role: admin}]\n"+
		"  - principal: fleet\n    hash: "+instanceHash+"\n    grants: [{role: instance, identities: [\"*\"]}]\n")
	srv := testserver.Start(t, server.WithAuthFile(auth))
	vs := pawlv1connect.NewValidatorServiceClient(testserver.WithBearer(testserver.HTTPClient(t), admin), srv.URL)
	up, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, "routing"), Name: "routing"}))
	if err != nil {
		t.Fatal(err)
	}
	// The man in the middle changes a digit of every release's content:
	// still a valid routing table, another digest.
	mitm := faultproxy.NewRewriter(t, srv.URL, func(_ string, msg proto.Message, request bool) {
		if resp, ok := msg.(*pawlv1.GetReleaseResponse); ok && !request {
			c := resp.GetRelease().GetSpec().GetContent()
			if i := bytes.IndexAny(c, "0123456789"); i >= 0 {
				c[i] = '0' + (c[i]-'0'+1)%10
			}
		}
	})

	if err := <-compiled; err != nil {
		t.Fatalf("tsc: %v\n%s", err, compileOutput.Bytes())
	}
	// The compiled files are ES modules, and resolve packages from the
	// repository's node_modules.
	if err := os.WriteFile(filepath.Join(out, "package.json"), []byte(`{"type":"module"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "node_modules"), filepath.Join(out, "node_modules")); err != nil {
		t.Fatal(err)
	}
	// Exit once the tests are done: in some runs an HTTP/2 connection to
	// pawld stays open after the follow tests closed their followers (see
	// README.md), and would keep node running until the deadline.
	args := []string{"--test", "--test-force-exit"}
	for _, f := range tests {
		args = append(args, filepath.Join(out, "sdk", "ts", "test", f))
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = append(os.Environ(),
		"PAWL_URL="+srv.URL, "PAWL_TAMPER_URL="+mitm.URL, "PAWL_ADMIN_TOKEN="+admin, "PAWL_INSTANCE_TOKEN="+instance,
		"PAWL_VALIDATOR_DIGEST="+up.Msg.GetValidator().GetDigest(),
		"PAWL_VECTORS="+filepath.Join(root, "sdk", "canonical", "testdata", "vectors.json"))
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, output)
	}
	t.Logf("node --test:\n%s", output)
}
