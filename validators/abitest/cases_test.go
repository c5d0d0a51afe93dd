package abitest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/validators/abi"
	"github.com/pawlcfg/pawl/validators/abitest"
	"github.com/pawlcfg/pawl/validators/host"
)

func writeCases(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadCases(t *testing.T) {
	dir := writeCases(t, map[string]string{
		"b.yaml":             "upstreams: []",
		"b.expect.json":      `{"valid": false, "media_type": "application/yaml", "config_name": "payments.routing", "params": {"strict": true}}`,
		"a.json":             `{}`,
		"a.expect.json":      `{"valid": true, "violations": []}`,
		"a.b.json":           `[]`,
		"a.b.expect.json":    `{"valid": true}`,
		"notes.md":           "not a case",
		"c.d.e.expect.json":  `{"valid": true}`,
		"c.d.e.input":        "x",
		"c.d.e.unrelated.md": "ignored: not NAME.EXT",
	})
	cases, err := abitest.LoadCases(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cases {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "a,a.b,b,c.d.e" {
		t.Fatalf("cases %q", names)
	}
	a, b := cases[0], cases[2]
	if string(a.Input.Config) != "{}" || a.Input.MediaType != abitest.DefaultMediaType || a.Input.Params != nil || !a.Expect.Valid || a.Expect.Violations == nil {
		t.Errorf("case a = %+v", a)
	}
	if string(b.Input.Config) != "upstreams: []" || b.Input.MediaType != "application/yaml" || b.Input.Name != "payments.routing" ||
		string(b.Input.Params) != `{"strict": true}` || b.Expect.Valid || b.Expect.Violations != nil {
		t.Errorf("case b = %+v", b)
	}
}

func TestLoadCasesRefusesMalformedDirectories(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"empty", map[string]string{"x.json": "{}"}, "has no NAME.expect.json file"},
		{"no input", map[string]string{"a.expect.json": `{"valid": true}`}, "want one input file a.EXT beside a.expect.json, found 0"},
		{"two inputs", map[string]string{"a.expect.json": `{"valid": true}`, "a.json": "{}", "a.yaml": ""}, "found 2"},
		{"unknown field", map[string]string{"a.expect.json": `{"valid": true, "violation": []}`, "a.json": "{}"}, `unknown field "violation"`},
		{"bad severity", map[string]string{"a.expect.json": `{"valid": false, "violations": [{"path": "", "severity": "fatal"}]}`, "a.json": "{}"}, `severity "fatal"`},
		{"not json", map[string]string{"a.expect.json": `valid`, "a.json": "{}"}, "a.expect.json: invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := abitest.LoadCases(writeCases(t, tt.files))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadCases = %v; want %q", err, tt.want)
			}
		})
	}
	if _, err := abitest.LoadCases(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("LoadCases of a missing directory succeeded")
	}
}

// TestLoadCasesStaysInItsDirectory plants a symbolic link to a file outside
// the directory: the os.Root refuses to follow it.
func TestLoadCasesStaysInItsDirectory(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := writeCases(t, map[string]string{"a.expect.json": `{"valid": true}`})
	if err := os.Symlink(outside, filepath.Join(dir, "a.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := abitest.LoadCases(dir); err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Fatalf("LoadCases followed a link out of its directory: %v", err)
	}
}

func TestExpectationMatch(t *testing.T) {
	res := host.Result{Valid: false, Violations: []abi.Violation{
		{Path: "/a", Message: "weight 120 is outside 0..100", Severity: abi.SeverityError},
		{Path: "", Message: "deprecated", Severity: abi.SeverityWarning},
	}}
	tests := []struct {
		expect string
		want   string // "" for a match
	}{
		{`{"valid": false}`, ""},
		{`{"valid": true}`, "want valid, got invalid"},
		{`{"valid": false, "violations": [{"path": "", "severity": "warning"}, {"path": "/a", "message": "outside 0..100"}]}`, ""},
		{`{"valid": false, "violations": [{"path": "/a", "message": "outside 0..100"}]}`, "unexpected violation [warning] (document): deprecated"},
		{`{"valid": false, "violations": [{"path": "/a", "message": "outside 1..9"}, {"path": "", "severity": "warning"}]}`, `no violation [error] /a containing "outside 1..9"; unexpected violation [error] /a`},
		{`{"valid": false, "violations": [{"path": "/a"}, {"path": ""}]}`, "no violation [error] (document)"},
		{`{"valid": false, "violations": []}`, "unexpected violation [error] /a"},
	}
	for _, tt := range tests {
		var e abitest.Expectation
		if err := json.Unmarshal([]byte(tt.expect), &e); err != nil {
			t.Fatal(err)
		}
		err := e.Match(res)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v; want a match", tt.expect, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v; want %q", tt.expect, err, tt.want)
		}
	}
}
