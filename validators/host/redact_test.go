package host

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRedact(t *testing.T) {
	config := []byte(`{"db":{"password":"hunter2-long","port":5432},"tokens":["abc\"def12"],"a/b":{"~k":"tilde-secret"},"short":"ab"}`)
	values := SecretValues(config, []string{"/db/password", "/db/port", "/tokens/0", "/a~1b/~0k", "/short", "/missing", "/tokens/9"})
	want := []string{"hunter2-long", "5432", `abc"def12`, "tilde-secret"}
	if !reflect.DeepEqual(values, want) {
		t.Fatalf("SecretValues = %q; want %q", values, want)
	}
	got := Redact(`password "hunter2-long" on port 5432, token "abc\"def12", tilde-secret`, values)
	if w := `password "[redacted]" on port [redacted], token "[redacted]", [redacted]`; got != w {
		t.Fatalf("Redact = %q; want %q", got, w)
	}
	if SecretValues([]byte("not json"), []string{"/a"}) != nil {
		t.Fatal("values from content that is not JSON")
	}
}

// TestSecretValuesOfContainers: a marked object or array hides its JSON
// text and each string and number in it, each value once.
func TestSecretValuesOfContainers(t *testing.T) {
	config := []byte(`{"db":{"user":"admin-user","pass":"hunter2-long","port":5432,"on":true},"dup":"hunter2-long"}`)
	got := SecretValues(config, []string{"/db", "/dup"})
	want := map[string]bool{`{"on":true,"pass":"hunter2-long","port":5432,"user":"admin-user"}`: true, "admin-user": true, "hunter2-long": true, "5432": true}
	if len(got) != len(want) {
		t.Fatalf("SecretValues = %q; want the %d of %v", got, len(want), want)
	}
	for _, v := range got {
		if !want[v] {
			t.Fatalf("SecretValues = %q; %q is not wanted", got, v)
		}
	}
	if r := Redact("pass hunter2-long for admin-user", got); r != "pass [redacted] for [redacted]" {
		t.Fatal(r)
	}
}

// TestRedactForms: a secret is hidden however a message writes it:
// quoted by Go, JSON (HTML-escaped), ASCII-only quoting, other languages'
// escapes, as the raw document wrote it, quoted twice, or cut short.
func TestRedactForms(t *testing.T) {
	jsonInside := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b[1 : len(b)-1])
	}
	const plain = "hunter2-long"
	const html = `p<a>&ss"word`
	const intl = "pässwörd-😀"
	for _, c := range []struct {
		name, secret, text, want string
	}{
		{"as it is", plain, "password hunter2-long!", "password [redacted]!"},
		{"%q", `abc"d\ef12`, fmt.Sprintf("token %q", `abc"d\ef12`), `token "[redacted]"`},
		{"json.Marshal with HTML escapes", html, "got " + jsonInside(html) + " end", "got [redacted] end"},
		{"json.Marshal of a line separator", "line\u2028sep-x", jsonInside("line\u2028sep-x"), "[redacted]"},
		{"strconv.QuoteToASCII", intl, strconv.QuoteToASCII(intl), `"[redacted]"`},
		{"%+q", intl, fmt.Sprintf("v=%+q;", intl), `v="[redacted]";`},
		{"JSON surrogate pair (ensure_ascii, JSON.stringify)", intl, `"p\u00e4ssw\u00f6rd-\ud83d\ude00"`, `"[redacted]"`},
		{"Rust \\u{...}", intl, `"p\u{e4}ssw\u{f6}rd-\u{1f600}"`, `"[redacted]"`},
		{"\\x and octal escapes", "tab\tnul\x00-secret", `'tab\x09nul\0-secret' "tab\011nul\000-secret"`, `'[redacted]' "[redacted]"`},
		{"the raw document's \\u escapes", plain, `value "hunter\u0032-long" refused`, `value "[redacted]" refused`},
		{"a JSON fragment quoted again", plain, fmt.Sprintf("%q", `{"pw":"hunter\u0032-long"}`), `"{\"pw\":\"[redacted]\"}"`},
		{"cut after 8 bytes", plain, "password hunter2-…", "password [redacted]…"},
		{"cut after 10 bytes", plain, "password hunter2-lo", "password [redacted]"},
		{"cut after escapes", intl, `"p\u00e4ssw\u00f6r`, `"[redacted]`},
		{"cut %q of a long secret", strings.Repeat("k", 40), fmt.Sprintf("%.12q", strings.Repeat("k", 40)), `"[redacted]"`},
		{"7 bytes are not enough", plain, "hunter2 is a classic", "hunter2 is a classic"},
		{"a short secret only whole", "5432", "port 5432, not 543", "port [redacted], not 543"},
		{"overlapping places", "aaaaaaaaab", "xaaaaaaaaaaby", "x[redacted]y"},
		{"backslashes that escape nothing", plain, `C:\dir\qx hunter2-long \`, `C:\dir\qx [redacted] \`},
		{"nothing to hide", plain, `a "quoted\n" line`, `a "quoted\n" line`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Redact(c.text, []string{c.secret}); got != c.want {
				t.Fatalf("Redact(%q) = %q; want %q", c.text, got, c.want)
			}
		})
	}
}

// TestRedactRawDocumentEscapes: the content's own \u escapes do not hide
// its secret from redaction, whichever way round a message writes it.
func TestRedactRawDocumentEscapes(t *testing.T) {
	config := []byte(`{"pw":"s\u00e9cret-\u0076alue","key":"plain-key-value"}`)
	values := SecretValues(config, []string{"/pw", "/key"})
	for text, want := range map[string]string{
		`decoded: sécret-value`:                         `decoded: [redacted]`,
		`raw: s\u00e9cret-\u0076alue`:                   `raw: [redacted]`,
		`escaped otherwise: plain-key-\u0076\x61lue`:    `escaped otherwise: [redacted]`,
		`raw document: {"pw":"s\u00e9cret-\u0076alue"}`: `raw document: {"pw":"[redacted]"}`,
	} {
		if got := Redact(text, values); got != want {
			t.Errorf("Redact(%q) = %q; want %q", text, got, want)
		}
	}
}

// TestRedactIsLinear: text and a secret built to make a naive search
// quadratic (runs of one byte) take milliseconds, not minutes.
func TestRedactIsLinear(t *testing.T) {
	secret := strings.Repeat("a", 1<<17) + "b"
	text := strings.Repeat("a", 1<<19)
	start := time.Now()
	if got := Redact(text, []string{secret}); got != Redacted {
		t.Fatalf("Redact = %d bytes starting %q", len(got), got[:min(len(got), 20)])
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("Redact of %d bytes took %s", len(text), d)
	}
}

// TestPrefixMatches checks the Z algorithm against the plain search it
// stands for, on texts with many overlapping near-matches.
func TestPrefixMatches(t *testing.T) {
	for _, c := range []struct{ text, p string }{
		{"aaaaaaaaaab", "aaaaaaaab"}, {"abababcabababab", "ababab"}, {"xabcabcabd", "abcabd"}, {"", "abc"}, {"abc", "a"},
		{strings.Repeat("abaab", 20), "abaababaabaab"}, {"mississippi", "issip"},
	} {
		got := prefixMatches(c.text, c.p)
		for i := range c.text {
			n := 0
			for i+n < len(c.text) && n < len(c.p) && c.text[i+n] == c.p[n] {
				n++
			}
			if got[i] != n {
				t.Fatalf("prefixMatches(%q, %q)[%d] = %d; want %d", c.text, c.p, i, got[i], n)
			}
		}
	}
}
