package pagetoken

import "testing"

var tokenSeeds = []Token{
	{Scope: "", Revision: 1, After: "/a"},
	{Scope: "/payments/", Revision: 42, After: "/payments/limits.json"},
	{Scope: "/ü/", Revision: 1 << 40, After: "/ü/ß"},
}

func TestRoundTrip(t *testing.T) {
	for _, tok := range tokenSeeds {
		got, err := Decode(tok.Encode())
		if err != nil || got != tok {
			t.Errorf("Decode(Encode(%+v)) = %+v, %v", tok, got, err)
		}
	}
	for _, bad := range []string{"", "!!", "AA", "AQ", "AgE"} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) accepted a malformed token", bad)
		}
	}
}

// FuzzDecode checks that no input panics and that whatever decodes encodes
// back to a token that decodes to the same value.
func FuzzDecode(f *testing.F) {
	for _, tok := range tokenSeeds {
		f.Add(tok.Encode())
	}
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Decode(s)
		if err != nil {
			return
		}
		again, err := Decode(tok.Encode())
		if err != nil || again != tok {
			t.Fatalf("re-encoded %+v decoded as %+v, %v", tok, again, err)
		}
	})
}
