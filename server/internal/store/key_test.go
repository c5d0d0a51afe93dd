package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pawlcfg/pawl/sdk/textsafe"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
)

// keyCases are the keys the table test checks and the fuzz target starts
// from.
var keyCases = []struct {
	key  string
	want string // a part of the error, "" for a valid key
}{
	{"/payments/limits.json", ""},
	{"/ü/日本/emoji-😀", ""},
	{"/a b/c", ""},
	{"", "empty"},
	{"payments", `does not start with "/"`},
	{"/" + strings.Repeat("a", store.MaxKeyBytes), "the limit is 1024"},
	{"/a\xff", "not valid UTF-8"},
	{"/a\x00b", "U+0000 (NUL) at byte 2"},
	{"/a\nb", "U+000A (line feed) at byte 2"},
	{"/a\tb", "U+0009 (tab) at byte 2"},
	{"/a\rb", "U+000D (carriage return) at byte 2"},
	{"/\x1b[31mred", "U+001B (escape) at byte 1"},
	{"/a\x7f", "U+007F (delete) at byte 2"},
	{"/a\u0085", "U+0085 (C1 control character) at byte 2"},
	{"/ü\u2028", "U+2028 (line separator) at byte 3"},
	{"/a\u2029", "U+2029 (paragraph separator)"},
	{"/\ufeffa", "U+FEFF (byte order mark) at byte 1"},
	{"/admin\u202e/txt.exe", "U+202E (bidirectional formatting character) at byte 6"},
	{"/a\u2066b", "U+2066 (bidirectional formatting character)"},
	{"/a\u200fb", "U+200F"},
	{"/admin\u200b", "U+200B (zero width space) at byte 6"},
	{"/a\u200cb", "U+200C (zero width non-joiner)"},
	{"/a\u200db", "U+200D (zero width joiner)"},
	{"/a\u2060b", "U+2060 (word joiner)"},
	{"/pass\u00adword", "U+00AD (soft hyphen) at byte 5"},
	{"/a\u180eb", "U+180E (Mongolian vowel separator)"},
	{"/a\ufff9b", "U+FFF9 (interlinear annotation character)"},
	{"/a\ufffbb", "U+FFFB (interlinear annotation character)"},
	{"/a\U000e0001b", "U+E0001 (tag character)"},
	{"/a\U000e007fb", "U+E007F (tag character)"},
	{"/a\u0600b", "U+0600 (format character)"},
	{"/a\U0001d173b", "U+1D173 (format character)"},
}

func TestValidateKey(t *testing.T) {
	for _, c := range keyCases {
		err := store.ValidateKey(c.key)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("ValidateKey(%q) = %v; want nil", c.key, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, store.ErrInvalidKey)):
			t.Errorf("ValidateKey(%q) = %v; want an ErrInvalidKey naming %q", c.key, err, c.want)
		}
		if c.key == "" {
			continue
		}
		perr := store.ValidatePrefix(c.key)
		if (perr == nil) != (err == nil) || (perr != nil && !strings.HasPrefix(perr.Error(), "store: invalid prefix: ")) {
			t.Errorf("ValidatePrefix(%q) = %v; want the key's verdict about a prefix (%v)", c.key, perr, err)
		}
	}
}

// FuzzValidateKey checks that ValidateKey never panics, accepts only
// printable UTF-8 paths, and that every key it accepts round-trips through
// the store: a Put, a Get and a List of the key as a prefix find it as it
// was written.
func FuzzValidateKey(f *testing.F) {
	for _, c := range keyCases {
		f.Add(c.key)
	}
	ctx := context.Background()
	st, err := boltstore.Open(ctx, f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	f.Fuzz(func(t *testing.T, key string) {
		err := store.ValidateKey(key)
		if err != nil {
			if !errors.Is(err, store.ErrInvalidKey) {
				t.Fatalf("ValidateKey(%q) = %v, which is not ErrInvalidKey", key, err)
			}
			return
		}
		if !utf8.ValidString(key) || !strings.HasPrefix(key, "/") || len(key) > store.MaxKeyBytes {
			t.Fatalf("ValidateKey accepted %q", key)
		}
		for _, r := range key {
			if textsafe.Breaking(r) != "" {
				t.Fatalf("ValidateKey accepted %q, which holds %U", key, r)
			}
		}
		value := []byte(key)
		if _, err := st.Put(ctx, store.Put{Key: key, Value: value}); err != nil {
			t.Fatalf("Put(%q): %v", key, err)
		}
		kv, _, err := st.Get(ctx, key, 0)
		if err != nil || kv.Key != key || string(kv.Value) != key {
			t.Fatalf("Get(%q) = %q %q, %v", key, kv.Key, kv.Value, err)
		}
		page, err := st.List(ctx, key, 0, "", 1)
		if err != nil || len(page.KVs) != 1 || page.KVs[0].Key != key {
			t.Fatalf("List(%q) = %+v, %v; want the key first", key, page, err)
		}
	})
}
