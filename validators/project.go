// Package validators writes the starting project of a validator, the
// directory `pawl validator new --lang LANG NAME` makes: a validator that
// builds as it is, its build file, a README that says how to build, test
// and upload it, and a cases directory that `pawl validator test` runs.
//
// A project carries a copy of its language's guest library (for Go,
// validators/guest and validators/abi; for Rust, validators/guest-rust; for
// AssemblyScript, validators/guest-as), so that it builds with nothing but
// its toolchain: ABI v1 does not change, and the copy is the library at
// the version of the pawl binary that wrote it. The ABI and the guest
// libraries live in the packages below this one (ABI.md).
package validators

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Lang is a language a starting project can be written in.
type Lang string

// The languages of starting projects.
const (
	Go             Lang = "go"
	Rust           Lang = "rust"
	AssemblyScript Lang = "assemblyscript"
)

// Langs lists the languages WriteProject knows, in the order help shows
// them.
func Langs() []Lang { return []Lang{Go, Rust, AssemblyScript} }

// files are the templates, under templates/LANG (templates/cases goes to
// every project's cases/; a file or directory dot-NAME is written .NAME;
// a suffix .tmpl keeps a Go or Cargo file out of this module's build), and
// the guest libraries the projects copy.
//
//go:embed templates guest/*.go abi/*.go guest-rust/Cargo.toml guest-rust/src/*.rs guest-as/assembly/*.ts
var files embed.FS

// The placeholders of templates: the project's name, and the name of its
// Rust crate (the name with underscores for hyphens), which names the
// module Cargo builds.
const (
	placeholder      = "__NAME__"
	cratePlaceholder = "__CRATE__"
)

// namePattern is what a project's name may be: a Go module path, a Rust
// crate and an npm package all accept it.
var namePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// libraries are the guest library files each language's project carries,
// as (source directory in this package, directory in the project).
var libraries = map[Lang][][2]string{
	Go:             {{"guest", "pawl/guest"}, {"abi", "pawl/abi"}},
	Rust:           {{"guest-rust", "pawl-guest"}},
	AssemblyScript: {{"guest-as", "pawl-guest"}},
}

// goImport is the import path of validators/abi that the Go project's copy
// of the guest library rewrites to its own.
const goImport = `"github.com/pawlcfg/pawl/validators/abi"`

// WriteProject makes dir, which must not exist, and writes lang's starting
// project into it; the project and its module, crate or package are named
// after dir's last element (lower-case letters, digits and hyphens,
// starting with a letter). It returns the files it wrote, relative to dir.
// On an error it leaves what it wrote for the caller to inspect.
func WriteProject(dir string, lang Lang) ([]string, error) {
	if !slices.Contains(Langs(), lang) {
		return nil, fmt.Errorf("validators: language %q: want one of %q", lang, Langs())
	}
	base := "templates/" + string(lang)
	if _, err := fs.Stat(files, base); err != nil {
		return nil, fmt.Errorf("validators: this build of pawl has no starting project in %s", lang)
	}
	name := path.Base(strings.ReplaceAll(strings.TrimRight(dir, `/\`), `\`, "/"))
	if !namePattern.MatchString(name) {
		return nil, fmt.Errorf("validators: project name %q: want lower-case letters, digits and hyphens, starting with a letter, at most 63", name)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("validators: %s exists; give the name of a new directory", dir)
		}
		return nil, fmt.Errorf("validators: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("validators: %w", err)
	}
	defer root.Close()
	var written []string
	write := func(name string, data []byte) error {
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := root.WriteFile(name, data, 0o644); err != nil {
			return err
		}
		written = append(written, name)
		return nil
	}
	expand := strings.NewReplacer(placeholder, name, cratePlaceholder, strings.ReplaceAll(name, "-", "_"))
	for _, tree := range [][2]string{{base, ""}, {"templates/cases", "cases/"}} {
		err := fs.WalkDir(files, tree[0], func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := files.ReadFile(p)
			if err != nil {
				return err
			}
			rel := tree[1] + strings.TrimSuffix(strings.TrimPrefix(p, tree[0]+"/"), ".tmpl")
			// embed leaves out names that start with a dot: the templates
			// spell them dot-NAME.
			parts := strings.Split(rel, "/")
			for i, part := range parts {
				if name, ok := strings.CutPrefix(part, "dot-"); ok {
					parts[i] = "." + name
				}
			}
			rel = strings.Join(parts, "/")
			return write(rel, []byte(expand.Replace(string(data))))
		})
		if err != nil {
			return written, fmt.Errorf("validators: write the project: %w", err)
		}
	}
	for _, lib := range libraries[lang] {
		err := fs.WalkDir(files, lib[0], func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
				return err
			}
			data, err := files.ReadFile(p)
			if err != nil {
				return err
			}
			if lang == Go {
				data = []byte(strings.ReplaceAll(string(data), goImport, `"`+name+`/pawl/abi"`))
			}
			return write(lib[1]+strings.TrimPrefix(p, lib[0]), data)
		})
		if err != nil {
			return written, fmt.Errorf("validators: copy the guest library: %w", err)
		}
	}
	return written, nil
}
