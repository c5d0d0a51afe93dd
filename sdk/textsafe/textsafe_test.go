package textsafe

import (
	"strings"
	"testing"
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
