package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/validators/host"
)

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidatorUploadLsAndValidate(t *testing.T) {
	srv := testserver.Start(t)
	wasm := wasmbuild.Build(t, "jsonschema")
	module := writeFile(t, "jsonschema.wasm", wasm)
	digest := host.Digest(wasm)

	expect(t, srv, digest+"\n", "validator", "upload", module, "--name", "limits", "--actor", "alice")
	code, out, _ := pawl(t, srv, "", "validator", "ls")
	if code != 0 || !strings.HasPrefix(out, digest+"\tlimits\t") || !strings.HasSuffix(out, "\talice\n") {
		t.Fatalf("validator ls = %d, %q", code, out)
	}

	bad := writeFile(t, "bad.json", []byte(`{"currency":"EUR","max_amount":0,"extra":true}`))
	code, out, _ = pawl(t, srv, "", "validate", "--validator", digest, "--file", bad)
	if code != 1 || !strings.Contains(out, "error\t/max_amount\tminimum: got 0, want 1") || !strings.Contains(out, "additional properties 'extra' not allowed") {
		t.Fatalf("validate of a bad config = %d, %q", code, out)
	}
	good := writeFile(t, "good.json", []byte(`{"currency":"EUR","max_amount":10}`))
	expect(t, srv, "valid\n", "validate", "--validator", digest, "--file", good)

	params := writeFile(t, "params.json", []byte(`{"schema":{"type":"array"}}`))
	code, out, _ = pawl(t, srv, "", "validate", "--validator", digest, "--file", good, "--params", params, "-o", "json")
	if code != 1 || strings.Contains(out, `"valid":true`) || !strings.Contains(out, `"message":"got object, want array"`) {
		t.Fatalf("validate with params -o json = %d, %q", code, out)
	}
}

func TestValidatorCommandErrors(t *testing.T) {
	srv := testserver.Start(t)
	notWasm := writeFile(t, "x.wasm", []byte("hello"))
	forbidden := writeFile(t, "f.wasm", wasmbuild.Build(t, "hostile/forbidden"))
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"validator", "upload", notWasm}, 1, "invalid_argument: validator: not a WebAssembly module"},
		{[]string{"validator", "upload", forbidden}, 1, "import env.pawl_escape is not allowed"},
		{[]string{"validator", "upload", "/nonexistent.wasm"}, 1, "read module"},
		{[]string{"validate", "--validator", host.Digest([]byte("x")), "--file", notWasm}, 1, "not_found: no validator has digest"},
		{[]string{"validate", "--file", notWasm}, 2, "give --validator and --file"},
	}
	for _, c := range cases {
		code, _, errOut := pawl(t, srv, "", c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("pawl %v = %d, %q; want %d and %q", c.args, code, errOut, c.code, c.msg)
		}
	}
}
