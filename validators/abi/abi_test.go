package abi

import (
	"bytes"
	"testing"
)

var inputSeeds = []Input{
	{},
	{Config: []byte(`{"a":1}`), MediaType: "application/json", Name: "/payments/limits.json", Params: []byte(`{"schema":{}}`)},
	{Config: bytes.Repeat([]byte{0, 1, 2}, 1000), Name: "ü"},
}

func TestInputRoundTrip(t *testing.T) {
	for _, in := range inputSeeds {
		got, err := DecodeInput(EncodeInput(in))
		if err != nil || !bytes.Equal(got.Config, in.Config) || got.MediaType != in.MediaType || got.Name != in.Name || !bytes.Equal(got.Params, in.Params) {
			t.Errorf("round trip of %+v = %+v, %v", in, got, err)
		}
	}
	full := EncodeInput(inputSeeds[1])
	for n := range len(full) {
		if _, err := DecodeInput(full[:n]); err == nil {
			t.Fatalf("DecodeInput accepted %d of %d bytes", n, len(full))
		}
	}
}

func TestNormalize(t *testing.T) {
	r := Result{Valid: true, Violations: []Violation{{Severity: SeverityWarning}}}
	r.Normalize()
	if !r.Valid {
		t.Fatal("a warning made the result invalid")
	}
	r = Result{Valid: true, Violations: []Violation{{Severity: "bogus"}}}
	r.Normalize()
	if r.Valid {
		t.Fatal("a non-warning violation left the result valid")
	}
	r = Result{}
	r.Normalize()
	if r.Violations == nil {
		t.Fatal("Violations left nil")
	}
}

func FuzzDecodeInput(f *testing.F) {
	for _, in := range inputSeeds {
		f.Add(EncodeInput(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeInput(b)
		if err != nil {
			return
		}
		again, err := DecodeInput(EncodeInput(in))
		if err != nil || !bytes.Equal(again.Config, in.Config) || again.Name != in.Name {
			t.Fatalf("re-encoded input decoded differently: %+v vs %+v (%v)", again, in, err)
		}
	})
}
