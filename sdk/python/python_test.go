// Package python_test runs the Python client's unittest suite
// (sdk/python/tests) against real pawld servers: one over plaintext
// HTTP/2, one over TLS, both with an auth file, the routing validator
// uploaded. The Python is Debian's /usr/bin/python3 with python3-grpcio
// and python3-protobuf; without them the test is skipped, except under
// CI=true, where it fails.
package python_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/testtls"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server"
)

func TestMain(m *testing.M) {
	code := m.Run()
	wasmbuild.Cleanup()
	os.Exit(code)
}

// python is the interpreter the client is written for: Debian's, whose
// packages provide grpc and protobuf (python3 on PATH may be another).
const python = "/usr/bin/python3"

// requirePython skips the test when the interpreter or its grpc and
// protobuf packages are missing, and fails it under CI=true, where .ci/run
// installs them.
func requirePython(t *testing.T) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import grpc, google.protobuf").CombinedOutput()
	if err == nil {
		return
	}
	msg := python + " with grpc and protobuf (Debian's python3-grpcio and python3-protobuf) is needed: " + err.Error() + "\n" + string(out)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestPythonClient runs every Python test: the canonical digest on the Go
// SDK's vectors, verify on tampered releases, and a client that follows a
// release through a rollout on a real pawld and ACKs, over plaintext and
// TLS, with bearer tokens.
func TestPythonClient(t *testing.T) {
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin, adminHash := testserver.NewToken(t)
	instance, instanceHash := testserver.NewToken(t)
	auth := testserver.WriteAuthFile(t, "tokens:\n"+
		"  - principal: operator\n    hash: "+adminHash+"\n    grants: [{role: admin}]\n"+
		"  - principal: fleet\n    hash: "+instanceHash+"\n    grants: [{role: instance, identities: [\"*\"]}, {role: reader, prefixes: [\"/\"]}]\n")
	plain := testserver.Start(t, server.WithAuthFile(auth))
	pki := testtls.New(t)
	tlsSrv := testserver.Start(t, server.WithAuthFile(auth), server.WithTLS(pki.ServerCert, pki.ServerKey))

	vs := pawlv1connect.NewValidatorServiceClient(testserver.BearerClient(t, admin), plain.URL)
	up, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, "routing"), Name: "routing"}))
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "-v")
	cmd.Dir = "."
	cmd.Env = append(os.Environ(),
		"PAWL_ADDR="+plain.Addr, "PAWL_TLS_ADDR="+tlsSrv.Addr, "PAWL_TLS_CA="+pki.CA,
		"PAWL_ADMIN_TOKEN="+admin, "PAWL_INSTANCE_TOKEN="+instance, "PAWL_VALIDATOR_DIGEST="+up.Msg.GetValidator().GetDigest(),
		"PAWL_GEN_PYTHON="+filepath.Join("..", "..", "gen", "python"), "PYTHONDONTWRITEBYTECODE=1",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s -m unittest: %v\n%s", python, err, out.String())
	}
	// Every test must have run: a skipped one proves nothing.
	if m := regexp.MustCompile(`(?m)^(.*\.\.\. skipped.*)$`).FindAllString(out.String(), -1); len(m) > 0 {
		t.Fatalf("%d Python tests were skipped:\n%s", len(m), out.String())
	}
	t.Logf("%s", out.String())
}
