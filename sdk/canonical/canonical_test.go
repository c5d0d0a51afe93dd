package canonical

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
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
