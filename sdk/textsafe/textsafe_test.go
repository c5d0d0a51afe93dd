package textsafe

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"fine\nline\ttab", 100, "fine\nline\ttab"},
		{"esc\x1b[2J \u202eevil\r", 100, "esc\ufffd[2J \ufffdevil\ufffd"},
		{"bad \xff utf8", 100, "bad \ufffd utf8"},
	} {
		if got := Clean(c.in, c.max); got != c.want {
			t.Errorf("Clean(%q) = %q; want %q", c.in, got, c.want)
		}
	}
	long := strings.Repeat("ü", 5000)
	got := Clean(long, 4096)
	if len(got) > 4096 || !utf8.ValidString(got) || !strings.HasSuffix(got, "(10000 bytes cut)") {
		t.Fatalf("Clean of 10000 bytes to 4096 = %d bytes ending %q", len(got), got[len(got)-30:])
	}
	if Problem(got, FreeTextBreaking) != "" {
		t.Fatalf("Clean left %s", Problem(got, FreeTextBreaking))
	}
}

func TestProblem(t *testing.T) {
	if p := Problem("ab\ncd", Breaking); p != "U+000A (line feed) at byte 2" {
		t.Fatal(p)
	}
	if p := Problem("ab\ncd", FreeTextBreaking); p != "" {
		t.Fatal(p)
	}
	if p := Problem("a\xffb", FreeTextBreaking); p != "an invalid UTF-8 byte at byte 1" {
		t.Fatal(p)
	}
}

// TestFormatCharactersBreak: every format character (Unicode Cf) breaks
// how text is shown, named by code point and kind, in keys and free text
// alike, and Clean replaces it; the visible characters around them do not.
func TestFormatCharactersBreak(t *testing.T) {
	for _, c := range []struct {
		r    rune
		name string
	}{
		{0x00ad, "soft hyphen"},
		{0x180e, "Mongolian vowel separator"},
		{0x200b, "zero width space"},
		{0x200c, "zero width non-joiner"},
		{0x200d, "zero width joiner"},
		{0x2060, "word joiner"},
		{0xfff9, "interlinear annotation character"},
		{0xfffb, "interlinear annotation character"},
		{0xe0001, "tag character"},
		{0xe0041, "tag character"},
		{0xe007f, "tag character"},
		{0x0600, "format character"},
		{0x2064, "format character"},
		{0xfeff, "byte order mark"},
		{0x202e, "bidirectional formatting character"},
	} {
		s := "ab" + string(c.r) + "c"
		want := fmt.Sprintf("%U (%s) at byte 2", c.r, c.name)
		for _, breaking := range []func(rune) string{Breaking, FreeTextBreaking} {
			if p := Problem(s, breaking); p != want {
				t.Errorf("Problem(%q) = %q; want %q", s, p, want)
			}
		}
		if got := Clean(s, 100); got != "ab\ufffdc" {
			t.Errorf("Clean(%q) = %q", s, got)
		}
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.Is(unicode.Cf, r) && Breaking(r) == "" {
			t.Errorf("Breaking(%U) = \"\"; it is a format character", r)
		}
	}
	for _, r := range "aü日😀\u00a0\u00ac\u00ae\ufe0f" {
		if Breaking(r) != "" {
			t.Errorf("Breaking(%U) = %q; want \"\"", r, Breaking(r))
		}
	}
}
