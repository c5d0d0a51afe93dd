package abitest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/pawlcfg/pawl/validators/abi"
	"github.com/pawlcfg/pawl/validators/host"
)

// DefaultMediaType is a case's media type unless its expectation gives
// one: that of `pawl release create` and `pawl validate`.
const DefaultMediaType = "application/json"

// expectSuffix ends the name of a case's expectation file.
const expectSuffix = ".expect.json"

// maxCaseBytes bounds each file LoadCases reads: a case's input is a
// config, and a server accepts none over 1 MiB by default; the bound
// leaves room for servers told to accept more.
const maxCaseBytes = 16 << 20

// Case is one of the author's inputs with the verdict the module must
// reach on it.
type Case struct {
	// Name names the case in the report.
	Name string
	// Input is what the module receives. Params nil means the parameters
	// of WithParams.
	Input host.Input
	// Expect is the verdict the module must reach.
	Expect Expectation
}

// Expectation is what a case expects of the module's result, and how its
// input is framed. It is the content of NAME.expect.json.
type Expectation struct {
	// Valid is the verdict.
	Valid bool `json:"valid"`
	// Violations, when present, must match the result's violations one
	// for one, in any order; absent (null), they are not compared.
	Violations *[]ExpectedViolation `json:"violations,omitempty"`
	// MediaType is the input's media type (DefaultMediaType if empty).
	MediaType string `json:"media_type,omitempty"`
	// ConfigName is the input's config name (empty if absent).
	ConfigName string `json:"config_name,omitempty"`
	// Params are the validator parameters of this case (a JSON document);
	// absent, those of WithParams.
	Params json.RawMessage `json:"params,omitempty"`
}

// ExpectedViolation matches a violation with the same path and severity
// whose message contains Message.
type ExpectedViolation struct {
	// Path is the violation's JSON Pointer, exactly ("" for the document).
	Path string `json:"path"`
	// Message is text the violation's message must contain; empty matches
	// any message.
	Message string `json:"message,omitempty"`
	// Severity is error or warning; empty means error.
	Severity abi.Severity `json:"severity,omitempty"`
}

// LoadCases reads the cases of dir: each NAME.expect.json (an
// Expectation) with its input, the one other file of dir whose name is
// NAME followed by an extension (NAME.json, NAME.yaml, NAME.input, ...),
// read as it is. Files are read through an os.Root: names outside dir and
// symbolic links out of it are refused. Cases come in the order of their
// names.
func LoadCases(dir string) ([]Case, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("abitest: cases: %w", err)
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return nil, fmt.Errorf("abitest: cases: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), expectSuffix) {
			names = append(names, strings.TrimSuffix(e.Name(), expectSuffix))
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("abitest: cases: %s has no NAME%s file", dir, expectSuffix)
	}
	var cases []Case
	for _, name := range names {
		c, err := loadCase(root, entries, name, name+expectSuffix)
		if err != nil {
			return nil, fmt.Errorf("abitest: case %s in %s: %w", name, dir, err)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func loadCase(root *os.Root, entries []fs.DirEntry, name, expectFile string) (Case, error) {
	raw, err := readFile(root, expectFile)
	if err != nil {
		return Case{}, err
	}
	var exp Expectation
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&exp); err != nil {
		return Case{}, fmt.Errorf("%s: %w (want {\"valid\": BOOL, \"violations\": [{\"path\": ..., \"message\": ..., \"severity\": ...}], \"media_type\", \"config_name\", \"params\"})", expectFile, err)
	}
	if exp.Violations != nil {
		for i, v := range *exp.Violations {
			if v.Severity != "" && v.Severity != abi.SeverityError && v.Severity != abi.SeverityWarning {
				return Case{}, fmt.Errorf("%s: violations[%d]: severity %q: want error or warning", expectFile, i, v.Severity)
			}
		}
	}
	var inputs []string
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() && n != expectFile && strings.HasPrefix(n, name+".") && !strings.HasSuffix(n, expectSuffix) &&
			!strings.Contains(strings.TrimPrefix(n, name+"."), ".") {
			inputs = append(inputs, n)
		}
	}
	if len(inputs) != 1 {
		return Case{}, fmt.Errorf("want one input file %s.EXT beside %s, found %d %q", name, expectFile, len(inputs), inputs)
	}
	config, err := readFile(root, inputs[0])
	if err != nil {
		return Case{}, err
	}
	in := host.Input{Config: config, MediaType: cmp.Or(exp.MediaType, DefaultMediaType), Name: exp.ConfigName}
	if len(exp.Params) > 0 && !bytes.Equal(exp.Params, []byte("null")) {
		in.Params = slices.Clone(exp.Params)
	}
	return Case{Name: name, Input: in, Expect: exp}, nil
}

// readFile reads name from root, refusing a file over maxCaseBytes.
func readFile(root *os.Root, name string) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCaseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxCaseBytes {
		return nil, fmt.Errorf("%s is over %d bytes", name, maxCaseBytes)
	}
	return b, nil
}

// errMismatch prefixes what differs between a result and its expectation.
var errMismatch = errors.New("abitest: the result differs from the expectation")

// Match says how res differs from e, or returns nil when it matches.
func (e Expectation) Match(res host.Result) error {
	var diffs []string
	if res.Valid != e.Valid {
		diffs = append(diffs, fmt.Sprintf("want %s, got %s", verdict(e.Valid), verdict(res.Valid)))
	}
	if e.Violations != nil {
		unmatched := slices.Clone(res.Violations)
		for _, want := range *e.Violations {
			i := slices.IndexFunc(unmatched, want.matches)
			if i < 0 {
				diffs = append(diffs, "no violation "+want.String())
				continue
			}
			unmatched = slices.Delete(unmatched, i, i+1)
		}
		for _, v := range unmatched {
			diffs = append(diffs, fmt.Sprintf("unexpected violation [%s] %s: %s", v.Severity, pathName(v.Path), v.Message))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", errMismatch, strings.Join(diffs, "; "))
}

func (w ExpectedViolation) matches(v abi.Violation) bool {
	return v.Path == w.Path && v.Severity == cmp.Or(w.Severity, abi.SeverityError) && strings.Contains(v.Message, w.Message)
}

// String describes the violations the expectation matches.
func (w ExpectedViolation) String() string {
	s := fmt.Sprintf("[%s] %s", cmp.Or(w.Severity, abi.SeverityError), pathName(w.Path))
	if w.Message != "" {
		s += fmt.Sprintf(" containing %q", w.Message)
	}
	return s
}

func pathName(p string) string { return cmp.Or(p, "(document)") }

func verdict(valid bool) string {
	if valid {
		return "valid"
	}
	return "invalid"
}

func validJSON(b []byte) bool { return json.Valid(b) }
