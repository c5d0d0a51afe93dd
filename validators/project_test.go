package validators_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/validators"
)

// TestWriteProject writes each language's project and checks what every
// project needs: its build file, its README, the guest library's copy,
// the cases, and no placeholder left.
func TestWriteProject(t *testing.T) {
	want := map[validators.Lang][]string{
		validators.Go:             {"go.mod", "main.go", "Makefile", "pawl/guest/guest.go", "pawl/abi/abi.go"},
		validators.Rust:           {"Cargo.toml", ".cargo/config.toml", "src/lib.rs", "Makefile", "pawl-guest/Cargo.toml", "pawl-guest/src/lib.rs"},
		validators.AssemblyScript: {"package.json", "package-lock.json", "asconfig.json", "assembly/index.ts", "pawl-guest/assembly/index.ts"},
	}
	for _, lang := range validators.Langs() {
		t.Run(string(lang), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "team-limits")
			written, err := validators.WriteProject(dir, lang)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range append(want[lang], "README.md", ".gitignore", "cases/valid.json", "cases/valid.expect.json") {
				if !contains(written, f) {
					t.Errorf("no %s among %q", f, written)
				}
			}
			for _, f := range written {
				if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, ".tmpl") {
					t.Errorf("wrote %s", f)
				}
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if s := string(b); strings.Contains(s, "__NAME__") || strings.Contains(s, "__CRATE__") || strings.Contains(s, "github.com/pawlcfg/pawl/validators/abi") {
					t.Errorf("%s keeps a placeholder or the repository's import path", f)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestWriteProjectRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir  string
		lang validators.Lang
		want string
	}{
		{filepath.Join(dir, "ok"), "cobol", `language "cobol"`},
		{filepath.Join(dir, "Upper"), validators.Go, `project name "Upper"`},
		{filepath.Join(dir, "9lives"), validators.Go, `project name "9lives"`},
		{filepath.Join(dir, "has_underscore"), validators.Go, "lower-case letters, digits and hyphens"},
		{filepath.Join(dir, "taken"), validators.Go, "exists"},
	} {
		if _, err := validators.WriteProject(tt.dir, tt.lang); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("WriteProject(%s, %s) = %v; want %q", tt.dir, tt.lang, err, tt.want)
		}
	}
}

// TestTheAssemblyScriptLockfilePinsTheRepositorysCompiler: the project's
// package-lock.json pins the compiler, and what it needs, exactly as the
// repository's does, so the project builds with the compiler CI tests.
func TestTheAssemblyScriptLockfilePinsTheRepositorysCompiler(t *testing.T) {
	read := func(path string) map[string]any {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var lock struct {
			Packages map[string]any `json:"packages"`
		}
		if err := json.Unmarshal(b, &lock); err != nil {
			t.Fatal(err)
		}
		return lock.Packages
	}
	repo, project := read(filepath.Join("..", "package-lock.json")), read(filepath.Join("templates", "assemblyscript", "package-lock.json"))
	for name, entry := range project {
		if name == "" {
			continue
		}
		if !reflect.DeepEqual(entry, repo[name]) {
			t.Errorf("the project's lockfile has %s as %v; the repository's as %v", name, entry, repo[name])
		}
	}
	if len(project) != 4 {
		t.Errorf("the project's lockfile has %d packages; want the root, assemblyscript, binaryen and long", len(project))
	}
}
