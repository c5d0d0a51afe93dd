package kvservice

import "testing"

var tokenSeeds = []pageToken{
	{prefix: "", revision: 1, after: "/a"},
	{prefix: "/payments/", revision: 42, after: "/payments/limits.json"},
	{prefix: "/ü/", revision: 1 << 40, after: "/ü/ß"},
}

func TestPageTokenRoundTrip(t *testing.T) {
	for _, tok := range tokenSeeds {
		got, err := decodePageToken(tok.encode())
		if err != nil || got != tok {
			t.Errorf("decode(encode(%+v)) = %+v, %v", tok, got, err)
		}
	}
	for _, bad := range []string{"", "!!", "AA", "AQ", "AgE"} {
		if _, err := decodePageToken(bad); err == nil {
			t.Errorf("decodePageToken(%q) accepted a malformed token", bad)
		}
	}
}

// FuzzDecodePageToken checks that no input panics and that whatever decodes
// encodes back to a token that decodes to the same value.
func FuzzDecodePageToken(f *testing.F) {
	for _, tok := range tokenSeeds {
		f.Add(tok.encode())
	}
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := decodePageToken(s)
		if err != nil {
			return
		}
		again, err := decodePageToken(tok.encode())
		if err != nil || again != tok {
			t.Fatalf("re-encoded %+v decoded as %+v, %v", tok, again, err)
		}
	})
}
