package parity_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/validators/host"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		os.Exit(code)
	}))
}

// module is one language's routing example, loaded.
type module struct {
	lang string
	v    *host.Validator
}

// modules loads the Go, Rust and AssemblyScript routing examples into one
// runtime, with the options the server uses by default.
func modules(t testing.TB) []module {
	t.Helper()
	ctx := context.Background()
	rt, err := host.New(ctx, host.WithCacheDir(wasmbuild.CacheDir(t)), host.WithCompileTimeout(wasmbuild.CompileTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	var ms []module
	for _, m := range []struct {
		lang string
		wasm []byte
	}{
		{"go", wasmbuild.Build(t, "routing")},
		{"rust", wasmbuild.BuildRust(t, "routing-rust")},
		{"assemblyscript", wasmbuild.BuildAssemblyScript(t, "routing-as")},
	} {
		v, err := rt.Load(ctx, host.Digest(m.wasm), m.wasm)
		if err != nil {
			t.Fatalf("load %s: %v", m.lang, err)
		}
		t.Cleanup(func() { _ = v.Close(ctx) })
		ms = append(ms, module{m.lang, v})
	}
	return ms
}

// edgeCases are inputs that files hold badly (bytes that are not UTF-8,
// very deep nesting) or that pin a rule of Go's encoding/json the ports
// must follow.
var edgeCases = map[string]string{
	"empty":                  ``,
	"spaces":                 " \t\r\n",
	"null":                   `null`,
	"array":                  `[1]`,
	"string":                 `"s"`,
	"number":                 `1`,
	"bool":                   `true`,
	"trailing-garbage":       `{"upstreams":[]}x`,
	"truncated":              `{"upstreams":[{"host":"a"`,
	"case-insensitive-keys":  `{"UPSTREAMS":[{"Host":"a","WEIGHT":100,"ToKeN":"0123456789abcdefg"}]}`,
	"kelvin-and-long-s":      `{"up\u017ftreams":[{"ho\u017Ft":"a","weight":100,"to\u212Aen":"short"}]}`,
	"escaped-keys":           `{"\u0075pstreams":[{"host":"a","weight":100}]}`,
	"duplicate-keys":         `{"upstreams":[{"host":"a","host":"b","weight":5,"weight":100}]}`,
	"duplicate-null-weight":  `{"upstreams":[{"host":"a","weight":5,"weight":null}]}`,
	"repeated-array-merges":  `{"upstreams":[{"host":"a","weight":50},{"host":"b","weight":50}],"upstreams":[{"weight":null}]}`,
	"repeated-array-keeps":   `{"upstreams":[{"host":"a","weight":50},{"host":"b","weight":50}],"upstreams":[{},{}]}`,
	"repeated-array-grows":   `{"upstreams":[{"host":"a","weight":50}],"upstreams":[{},{"host":"b"}]}`,
	"null-upstreams":         `{"upstreams":[{"host":"a","weight":50}],"upstreams":null}`,
	"empty-then-repeated":    `{"upstreams":[{"host":"a","weight":50}],"upstreams":[],"upstreams":[{}]}`,
	"null-item":              `{"upstreams":[null,{"host":"b","weight":100}]}`,
	"item-not-object":        `{"upstreams":["a"]}`,
	"upstreams-object":       `{"upstreams":{}}`,
	"upstreams-string":       `{"upstreams":"a"}`,
	"weight-fraction":        `{"upstreams":[{"host":"a","weight":1.5}]}`,
	"weight-exponent":        `{"upstreams":[{"host":"a","weight":1e2}]}`,
	"weight-minus-zero":      `{"upstreams":[{"host":"a","weight":-0},{"host":"b","weight":100}]}`,
	"weight-negative":        `{"upstreams":[{"host":"a","weight":-7},{"host":"b","weight":100}]}`,
	"weight-huge":            `{"upstreams":[{"host":"a","weight":99999999999999999999}]}`,
	"weight-int64-min":       `{"upstreams":[{"host":"a","weight":-9223372036854775808}]}`,
	"weight-int64-max":       `{"upstreams":[{"host":"a","weight":9223372036854775807}]}`,
	"weight-string":          `{"upstreams":[{"host":"a","weight":"100"}]}`,
	"weight-bool":            `{"upstreams":[{"host":"a","weight":true}]}`,
	"weight-array":           `{"upstreams":[{"host":"a","weight":[100]}]}`,
	"host-number":            `{"upstreams":[{"host":1,"weight":100}]}`,
	"host-object":            `{"upstreams":[{"host":{"a":[1]},"weight":[1]}]}`,
	"token-bool":             `{"upstreams":[{"host":"a","weight":100,"token":false}]}`,
	"first-error-wins":       `{"upstreams":[{"weight":"x","host":2}]}`,
	"syntax-beats-type":      `{"upstreams":"a",}`,
	"leading-zero":           `{"upstreams":[{"host":"a","weight":0100}]}`,
	"bad-escape":             `{"upstreams":[{"host":"\q"}]}`,
	"control-in-string":      "{\"upstreams\":[{\"host\":\"a\tb\"}]}",
	"escapes":                `{"upstreams":[{"host":"a\"\\\/\b\f\n\r\t\u0007\u000b\u007f\u0080\u00a0\u00e9\u200b\ufeff\ue000","weight":50},{"host":"a\"\\\/\b\f\n\r\t\u0007\u000b\u007f\u0080\u00a0\u00e9\u200b\ufeff\ue000","weight":50}]}`,
	"surrogates":             `{"upstreams":[{"host":"\ud83d\ude00 \ud800 \udc00x \ud800\u0041","weight":50},{"host":"\ud83d\ude00 \ud800 \udc00x \ud800\u0041","weight":50}]}`,
	"astral-unprintable":     `{"upstreams":[{"host":"\udb40\udc01\ud800\udc00","weight":50},{"host":"\udb40\udc01\ud800\udc00","weight":50}]}`,
	"invalid-utf8":           "{\"upstreams\":[{\"host\":\"\xe2\x82A\xff\xed\xa0\x80\xf4\x90\x80\x80\",\"weight\":50},{\"host\":\"\xe2\x82A\xff\xed\xa0\x80\xf4\x90\x80\x80\",\"weight\":50}]}",
	"invalid-utf8-key":       "{\"upstreams\xff\":[]}",
	"multibyte-token":        `{"upstreams":[{"host":"a","weight":100,"token":"ééééééé"}]}`,
	"deep-ok":                `{"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `,"upstreams":[]}`,
	"too-deep":               `{"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"upstreams":[]}`,
	"many-upstreams":         manyUpstreams(120),
	"unknown-fields":         `{"extra":{"a":[true,false,null,-1.5e-3]},"upstreams":[{"host":"a","weight":100,"port":1}]}`,
	"bom":                    "\xef\xbb\xbf{}",
	"literal-typos":          `{"upstreams":[{"host":"a","weight":nul}]}`,
	"number-edge-syntax":     `{"upstreams":[{"host":"a","weight":-}]}`,
	"exponent-without-digit": `{"upstreams":[{"host":"a","weight":1e}]}`,
}

func manyUpstreams(n int) string {
	var b strings.Builder
	b.WriteString(`{"upstreams":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"host":"h%d.internal:443","weight":%d,"token":"tok-%d"}`, i%100, i%3, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// inputs returns every input of the test, by name.
func inputs(t testing.TB) map[string][]byte {
	t.Helper()
	in := map[string][]byte{}
	for name, s := range edgeCases {
		in["edge/"+name] = []byte(s)
	}
	for _, dir := range []string{"testdata", filepath.Join(wasmbuild.Examples(), "routing", "cases")} {
		files, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, ".expect.json") || strings.HasSuffix(f, ".md") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			in[filepath.Base(dir)+"/"+filepath.Base(f)] = b
		}
	}
	return in
}

// compare validates config with every module and reports where a port's
// result differs from the Go module's.
func compare(t testing.TB, ms []module, config []byte) {
	t.Helper()
	ctx := context.Background()
	in := host.Input{Config: config, MediaType: "application/json", Name: "routing"}
	want, err := ms[0].v.Validate(ctx, in)
	if err != nil {
		t.Fatalf("go: %v", err)
	}
	for _, m := range ms[1:] {
		got, err := m.v.Validate(ctx, in)
		if err != nil {
			t.Errorf("%s: %v", m.lang, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s differs from go on %.200q:\n got %s\nwant %s", m.lang, config, show(got), show(want))
		}
	}
}

func show(r host.Result) string {
	b, _ := json.Marshal(r)
	return string(b)
}

// TestSameVerdicts checks every input: the ports' results equal the Go
// module's.
func TestSameVerdicts(t *testing.T) {
	ms := modules(t)
	in := inputs(t)
	names := make([]string, 0, len(in))
	for name := range in {
		names = append(names, name)
	}
	sort.Strings(names)
	verdicts := map[bool]int{}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			compare(t, ms, in[name])
		})
		res, err := ms[0].v.Validate(context.Background(), host.Input{Config: in[name]})
		if err == nil {
			verdicts[res.Valid]++
		}
	}
	// The inputs must exercise both verdicts, or the test proves little.
	if verdicts[true] < 3 || verdicts[false] < 20 {
		t.Fatalf("inputs give %d valid and %d invalid verdicts; want both", verdicts[true], verdicts[false])
	}
}

// FuzzParity looks for an input on which a port and the Go module differ.
func FuzzParity(f *testing.F) {
	for _, s := range edgeCases {
		if len(s) < 1000 {
			f.Add([]byte(s))
		}
	}
	ms := modules(f)
	f.Fuzz(func(t *testing.T, config []byte) {
		compare(t, ms, config)
	})
}

// TestIsPrintTables checks the ports' tables of printable runes against
// Go's strconv.IsPrint, which fmt's %q follows; -update rewrites them.
func TestIsPrintTables(t *testing.T) {
	for _, f := range []struct{ path, want string }{
		{filepath.Join(wasmbuild.Examples(), "routing-rust", "src", "isprint.rs"), isPrintRust()},
		{filepath.Join(wasmbuild.Examples(), "routing-as", "assembly", "isprint.ts"), isPrintAS()},
	} {
		got, err := os.ReadFile(f.path)
		if *update {
			if err := os.WriteFile(f.path, []byte(f.want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, []byte(f.want)) {
			t.Errorf("%s is not what strconv.IsPrint says; run go test -run TestIsPrintTables -update ./validators/examples/parity", f.path)
		}
	}
}
