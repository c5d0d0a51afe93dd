// Package textsafe says which characters break how text is shown on a
// terminal, in a log line or on a web page, and makes text safe to send
// where the server bounds it. The server refuses such characters in keys
// and request text; the SDK cleans the text it sends (ACK reasons) the same
// way, so that an instance never loses a report to them. It depends on the
// standard library only.
package textsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Breaking names r when it breaks how text is shown, and returns ""
// otherwise: C0 controls (NUL, tab, newline, escape...), DEL, C1 controls,
// the Unicode line and paragraph separators, the byte order mark, the
// bidirectional marks, embeddings, overrides and isolates ("Trojan
// Source", CVE-2021-42574), and every other format character (Unicode
// category Cf), which is invisible or changes how its neighbours are
// shown: zero width spaces and joiners, the word joiner, the soft hyphen,
// interlinear annotation characters, tag characters (which can spell
// hidden text) and the rest, so that two keys or names that look the
// same are the same.
func Breaking(r rune) string {
	switch {
	case r == 0:
		return "NUL"
	case r == '\t':
		return "tab"
	case r == '\n':
		return "line feed"
	case r == '\r':
		return "carriage return"
	case r == 0x1b:
		return "escape"
	case r < 0x20:
		return "control character"
	case r == 0x7f:
		return "delete"
	case r >= 0x80 && r <= 0x9f:
		return "C1 control character"
	case r == 0x2028:
		return "line separator"
	case r == 0x2029:
		return "paragraph separator"
	case r == 0xfeff:
		return "byte order mark"
	case r == 0x200e || r == 0x200f || r == 0x061c || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
		return "bidirectional formatting character"
	case r < 0xad:
		return "" // the common case: no format character below U+00AD
	case r == 0xad:
		return "soft hyphen"
	case r == 0x200b:
		return "zero width space"
	case r == 0x200c:
		return "zero width non-joiner"
	case r == 0x200d:
		return "zero width joiner"
	case r == 0x2060:
		return "word joiner"
	case r == 0x180e:
		return "Mongolian vowel separator"
	case r >= 0xfff9 && r <= 0xfffb:
		return "interlinear annotation character"
	case r >= 0xe0000 && r <= 0xe007f:
		return "tag character"
	case unicode.Is(unicode.Cf, r):
		return "format character"
	}
	return ""
}

// FreeTextBreaking is Breaking for free text (reasons, messages), which may
// hold line feeds and tabs.
func FreeTextBreaking(r rune) string {
	if r == '\n' || r == '\t' {
		return ""
	}
	return Breaking(r)
}

// Problem describes the first character of s that breaks (by the given
// test, Breaking or FreeTextBreaking) as "U+000A (line feed) at byte 5",
// or returns "" when there is none. Invalid UTF-8 is a problem too.
func Problem(s string, breaking func(rune) string) string {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return fmt.Sprintf("an invalid UTF-8 byte at byte %d", i)
			}
		}
		if name := breaking(r); name != "" {
			return fmt.Sprintf("%U (%s) at byte %d", r, name, i)
		}
	}
	return ""
}

// Clean makes free text safe to send: characters FreeTextBreaking names
// and invalid UTF-8 become U+FFFD, and text longer than max bytes is cut
// at a character boundary and ends with a note of how much was cut, the
// whole within max bytes.
func Clean(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || FreeTextBreaking(r) != "" {
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) <= max {
		return out
	}
	note := fmt.Sprintf(" … (%d bytes cut)", len(out))
	cut := max - len(note)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	if cut <= 0 {
		return out[:0]
	}
	return out[:cut] + note
}
