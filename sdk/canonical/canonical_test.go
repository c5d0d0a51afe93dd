package canonical

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the digests in testdata/vectors.json")

type vector struct {
	Name      string `json:"name"`
	MediaType string `json:"media_type"`
	Content   string `json:"content"`
	Canonical string `json:"canonical"`
	Digest    string `json:"digest,omitempty"`
}

var vectorsFile = filepath.Join("testdata", "vectors.json")

func readVectors(t testing.TB) []vector {
	t.Helper()
	b, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestVectors checks the canonical form and digest of every vector. The
// canonical forms were written from RFC 8785, not produced by this code;
// the digests are sha256 over the documented bytes (-update rewrites them).
func TestVectors(t *testing.T) {
	vs := readVectors(t)
	for i, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			form, err := Form(v.MediaType, []byte(v.Content))
			if err != nil || string(form) != v.Canonical {
				t.Fatalf("Form = %q, %v\nwant   %q", form, err, v.Canonical)
			}
			d, err := Digest(v.MediaType, []byte(v.Content))
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				vs[i].Digest = d
				return
			}
			if d != v.Digest {
				t.Fatalf("Digest = %s, want %s", d, v.Digest)
			}
		})
	}
	if *update {
		b, err := json.MarshalIndent(vs, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorsFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEquivalentJSONHasOneDigest(t *testing.T) {
	a, _ := Digest("application/json", []byte(`{"b":1,"a":[1.0,2]}`))
	b, _ := Digest("application/json; charset=utf-8", []byte("{\n  \"a\": [1, 2e0],\n  \"b\": 1\n}\n"))
	if a != b || a == "" {
		t.Fatalf("equivalent documents: %s and %s", a, b)
	}
	c, _ := Digest("text/plain", []byte(`{"b":1,"a":[1.0,2]}`))
	if c == a {
		t.Fatal("the media type is not part of the digest")
	}
}

func TestInvalidJSONIsRefused(t *testing.T) {
	for _, in := range []string{``, `{`, `{"a":1}{}`, `{"a":1,"a":2}`, `[1e400]`, "\"\xff\"", `nul`} {
		if _, err := Form("application/json", []byte(in)); !errors.Is(err, ErrInvalidJSON) {
			t.Errorf("Form(%q) = %v, want ErrInvalidJSON", in, err)
		}
	}
}

// FuzzForm checks that canonicalizing is idempotent: the canonical form of
// a canonical form is itself.
func FuzzForm(f *testing.F) {
	for _, v := range readVectors(f) {
		f.Add(v.Content)
	}
	f.Fuzz(func(t *testing.T, in string) {
		form, err := Form("application/json", []byte(in))
		if err != nil {
			return
		}
		again, err := Form("application/json", form)
		if err != nil || string(again) != string(form) {
			t.Fatalf("Form(Form(%q)) = %q, %v; want %q", in, again, err, form)
		}
	})
}

// parityInputs are inputs where a one-pass parser is easy to get wrong:
// escaped keys (the scratch they are unescaped into is reused), surrogate
// halves, keys that sort differently by UTF-16 than by code point, and the
// grammar's edges.
var parityInputs = []string{
	`{"\/":1,"a\n":{"\u0062":2,"\u0061":[3,{"\"":4}]},"/":5}`,
	`{"\ud83d\ude00":1,"\uffff":2,"\ue000":3,"z":4}`,
	`["\ud800","\udc00x","\ud800\u0041","\ud83d\ude00","\uD83D\uDE00"]`,
	`{"a":1,"\u0061":2}`, `{"b":{"x":1,"x":2}}`,
	`[1,]`, `{"a":1,}`, `[,1]`, `{,}`, `{"a" 1}`, `{"a":}`, `{1:2}`, `[1 2]`,
	`01`, `-`, `-0`, `1.`, `.5`, `1e`, `1e+`, `1E-7`, `-0.0e0`, `1e400`, `1e-400`, `123456789012345678901234567890`,
	`"\x"`, `"\u12"`, `"\u12G4"`, "\"a\tb\"", `"\b\f\n\r\t\"\\\/"`, `"\u0000\u001f\u007f"`,
	`tru`, `true `, ` null`, `nulll`, `[true,false,null]`, `{}`, `[]`, `[{}]`, `{"":{}}`, "\ufeff{}",
	`[[[[[[[[[[]]]]]]]]]]`, `{"a":[{"b":{"c":[1,2,{"d":"e"}]}}]}`, `"`, `[`, `{"a`, `{"a":1`,
}

// TestFormMatchesTheDecoder: the one-pass parser writes what the first
// implementation, on encoding/json's Decoder, wrote, and refuses what it
// refused.
func TestFormMatchesTheDecoder(t *testing.T) {
	for _, v := range readVectors(t) {
		parityInputs = append(parityInputs, v.Content)
	}
	for _, in := range parityInputs {
		checkParity(t, in)
	}
}

// FuzzFormMatchesTheDecoder is TestFormMatchesTheDecoder on any input.
func FuzzFormMatchesTheDecoder(f *testing.F) {
	for _, v := range readVectors(f) {
		f.Add(v.Content)
	}
	for _, in := range parityInputs {
		f.Add(in)
	}
	f.Fuzz(checkParity)
}

func checkParity(t *testing.T, in string) {
	got, err := Form("application/json", []byte(in))
	want, werr := decoderForm("application/json", []byte(in))
	switch {
	case (err == nil) != (werr == nil):
		t.Fatalf("Form(%q) = %q, %v; the decoder: %q, %v", in, got, err, want, werr)
	case err != nil && !errors.Is(err, ErrInvalidJSON):
		t.Fatalf("Form(%q) = %v, want ErrInvalidJSON", in, err)
	case string(got) != string(want):
		t.Fatalf("Form(%q) = %q; the decoder: %q", in, got, want)
	}
}

// FuzzCompareUTF16 checks the key order against UTF-16 code units, as
// encoded by unicode/utf16.
func FuzzCompareUTF16(f *testing.F) {
	f.Add("a", "b")
	f.Add("\U0001F600", "\uffff")
	f.Add("\ue000", "\U00010000")
	f.Add("ab", "a")
	f.Fuzz(func(t *testing.T, a, b string) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return
		}
		got := compareUTF16([]byte(a), []byte(b)) < 0
		if want := oracleLessUTF16(a, b); got != want {
			t.Fatalf("compareUTF16(%q, %q) < 0 = %t, want %t", a, b, got, want)
		}
	})
}

// BenchmarkDigest is the digest of a small routing config, as an SDK
// instance computes it for each release it applies.
func BenchmarkDigest(b *testing.B) {
	content := []byte(`{"upstreams":[{"host":"a.internal","weight":30,"zone":"eu-west-1a"},{"host":"b.internal","weight":70,"zone":"eu-west-1b"}],` +
		`"retries":{"attempts":3,"backoff_ms":[50,100,200]},"timeout_ms":1500,"description":"routing for the \"checkout\" service\n"}`)
	for _, impl := range []struct {
		name string
		form func(string, []byte) ([]byte, error)
	}{{"parser", Form}, {"decoder", decoderForm}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := impl.form("application/json", content); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestNestingIsBounded: a value inside MaxDepth arrays or objects is
// canonicalized, one a level deeper is refused (by the parser and the
// oracle alike), and so is a document far deeper, without exhausting the
// stack.
func TestNestingIsBounded(t *testing.T) {
	nest := func(open, closing string, n int) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(closing, n)
	}
	for _, c := range []struct {
		in string
		ok bool
	}{
		{nest("[", "]", MaxDepth), true},
		{nest("[", "]", MaxDepth+1), false},
		{nest(`{"a":`, "}", MaxDepth), true},
		{nest(`{"a":`, "}", MaxDepth+1), false},
		{strings.Repeat("[", 8<<20), false},
	} {
		_, err := Form("application/json", []byte(c.in))
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalidJSON)) {
			t.Errorf("%d bytes of nesting: %v, want ok %t", len(c.in), err, c.ok)
		}
		if len(c.in) < 1<<20 {
			checkParity(t, c.in)
		}
	}
}
