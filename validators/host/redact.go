package host

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Redacted replaces a secret value in text.
const Redacted = "[redacted]"

// minSecretBytes is the shortest value redacted: a shorter one ("1",
// "on") would blank out ordinary words and numbers all over a message
// while hiding nothing worth hiding.
const minSecretBytes = 4

// minPrefixBytes is the shortest start of a secret that is redacted on
// its own, where a message was cut in the middle of the value ("password
// hunter2-lo…"): 8 bytes rarely begin an ordinary word by chance, and a
// cut that leaves fewer shows less than 8 bytes of the secret. A secret
// shorter than this is redacted only whole.
const minPrefixBytes = 8

// maxEscapeLayers is how many times text is read as an escaped string
// literal to find secrets written escaped: once for a value a message
// quoted (%q, JSON, a Rust or Python repr) or copied from the raw
// document, twice for such a quotation quoted again (a JSON fragment in
// a JSON string).
const maxEscapeLayers = 2

// SecretValues returns the values at the JSON Pointers secrets (a
// validator's Result.Secrets) in config, a JSON document: strings as they
// are, other values as their JSON text, and of an object or array also
// each string and number it holds, however deep. Values shorter than 4
// bytes, pointers that do not resolve, and content that is not JSON,
// give nothing; each value is returned once.
func SecretValues(config []byte, secrets []string) []string {
	if len(secrets) == 0 {
		return nil
	}
	var doc any
	if err := json.Unmarshal(config, &doc); err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if len(s) >= minSecretBytes && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, ptr := range secrets {
		v, ok := resolve(doc, ptr)
		if !ok {
			continue
		}
		if s, isString := v.(string); isString {
			add(s)
			continue
		}
		b, _ := json.Marshal(v)
		add(string(b))
		switch v.(type) {
		case map[string]any, []any:
			leaves(v, add)
		}
	}
	return out
}

// leaves calls add with each string and number (as JSON text) in v.
func leaves(v any, add func(string)) {
	switch node := v.(type) {
	case map[string]any:
		for _, c := range node {
			leaves(c, add)
		}
	case []any:
		for _, c := range node {
			leaves(c, add)
		}
	case string:
		add(node)
	case float64:
		b, _ := json.Marshal(node)
		add(string(b))
	}
}

// Redact replaces with Redacted every place in text that shows one of
// values:
//
//   - the value as it is, or as an escaped string literal shows it: as
//     %q, strconv.QuoteToASCII, json.Marshal (with its HTML escapes,
//     \u003c), Rust's \u{...} or Python's \x..; as the raw JSON document
//     wrote it, with its own \u escapes; or such a literal quoted once more
//     (text is read as an escaped literal up to twice, besides as it is);
//   - the first minPrefixBytes (8) bytes or more of a value, where a
//     message was cut in the middle of it; a value shorter than that only
//     whole.
//
// Overlapping or adjacent places become one Redacted. For each value it
// takes time linear in the length of text.
func Redact(text string, values []string) string {
	if len(values) == 0 || text == "" {
		return text
	}
	var spans []span
	layer := escapedLayer{text: text}
	for i := 0; ; i++ {
		for _, v := range values {
			spans = layer.find(v, spans)
		}
		if i == maxEscapeLayers || !strings.Contains(layer.text, `\`) {
			break
		}
		next := layer.unescape()
		if next.text == layer.text {
			break
		}
		layer = next
	}
	return replaceSpans(text, spans)
}

// RedactViolations returns vs with the values in messages redacted.
func RedactViolations(vs []Violation, values []string) []Violation {
	if len(values) == 0 {
		return vs
	}
	out := make([]Violation, len(vs))
	for i, v := range vs {
		v.Message = Redact(v.Message, values)
		out[i] = v
	}
	return out
}

// span is a byte range [start, end) of the original text.
type span struct{ start, end int }

// escapedLayer is the original text read as escaped string literals some
// number of times: text, and for each of its bytes the range of the
// original text it came from (nil when text is the original).
type escapedLayer struct {
	text       string
	start, end []int
}

// origin is the range of the original text that text[from:to] came from.
func (l escapedLayer) origin(from, to int) span {
	if l.start == nil {
		return span{from, to}
	}
	return span{l.start[from], l.end[to-1]}
}

// find appends to spans the places of l that show v whole, or its first
// minPrefixBytes bytes or more, as ranges of the original text.
func (l escapedLayer) find(v string, spans []span) []span {
	need := min(len(v), minPrefixBytes)
	if need == 0 || !strings.Contains(l.text, v[:need]) {
		return spans // the common case, without allocating
	}
	for i, n := range prefixMatches(l.text, v) {
		if n >= need {
			spans = append(spans, l.origin(i, i+n))
		}
	}
	return spans
}

// prefixMatches returns, for each position i of text, the length of the
// longest common prefix of text[i:] and p (Gusfield's Z algorithm
// carried over to text: linear in the lengths of both).
func prefixMatches(text, p string) []int {
	p = p[:min(len(p), len(text))]
	out := make([]int, len(text))
	matchPrefix(text, p, zArray(p), out)
	return out
}

// zArray returns for each i the length of the longest common prefix of
// p[i:] and p (z[0] is len(p)).
func zArray(p string) []int {
	z := make([]int, len(p))
	if len(p) > 0 {
		z[0] = len(p)
		matchPrefix(p[1:], p, z, z[1:]) // z[i] needs only z[1:i]
	}
	return z
}

// matchPrefix sets out[i] to the length of the longest common prefix of
// text[i:] and p, given z, p's Z array, or as much of it as the matches
// before i reach.
func matchPrefix(text, p string, z, out []int) {
	l, r := 0, 0 // text[l:r] == p[:r-l], the match reaching furthest right
	for i := range text {
		n := 0
		if i < r {
			if k := z[i-l]; k < r-i {
				out[i] = k
				continue
			}
			n = r - i
		}
		for i+n < len(text) && n < len(p) && text[i+n] == p[n] {
			n++
		}
		out[i] = n
		if i+n > r {
			l, r = i, i+n
		}
	}
}

// unescape reads l as the inside of an escaped string literal, keeping
// for each byte it writes the range of the original text it came from. A
// backslash that starts no escape it knows stays as it is.
func (l escapedLayer) unescape() escapedLayer {
	s := l.text
	var b []byte
	var start, end []int
	emit := func(from, to int, out ...byte) {
		o := l.origin(from, to)
		for _, c := range out {
			b = append(b, c)
			start, end = append(start, o.start), append(end, o.end)
		}
	}
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			emit(i, i+1, s[i])
			i++
			continue
		}
		out, n := unescapeOne(s[i:])
		if n == 0 {
			emit(i, i+1, '\\')
			i++
			continue
		}
		emit(i, i+n, out...)
		i += n
	}
	return escapedLayer{text: string(b), start: start, end: end}
}

// simpleEscapes are the one-letter escapes of Go, JSON, C, JavaScript,
// Python and Rust string literals.
var simpleEscapes = map[byte]byte{
	'"': '"', '\'': '\'', '\\': '\\', '/': '/', '`': '`',
	'a': '\a', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v',
}

// unescapeOne reads the escape at the start of s (which starts with a
// backslash) and returns what it stands for and its length, or n == 0
// when s starts no escape it knows: \" \\ \n and the other one-letter
// escapes, \xHH, \ooo (octal), \0, \uXXXX (with a UTF-16 surrogate pair
// as two), \u{X...} and \UXXXXXXXX.
func unescapeOne(s string) (out []byte, n int) {
	if len(s) < 2 {
		return nil, 0
	}
	c := s[1]
	if r, ok := simpleEscapes[c]; ok {
		return []byte{r}, 2
	}
	switch {
	case c == 'x' && len(s) >= 4:
		if v, err := strconv.ParseUint(s[2:4], 16, 8); err == nil {
			return []byte{byte(v)}, 4
		}
	case c >= '0' && c <= '7':
		if len(s) >= 4 {
			if v, err := strconv.ParseUint(s[1:4], 8, 8); err == nil {
				return []byte{byte(v)}, 4
			}
		}
		if c == '0' {
			return []byte{0}, 2
		}
	case c == 'u' && len(s) >= 3 && s[2] == '{':
		if end := strings.IndexByte(s[:min(len(s), 10)], '}'); end > 3 {
			if v, err := strconv.ParseUint(s[3:end], 16, 32); err == nil {
				return utf8Rune(rune(v)), end + 1
			}
		}
	case c == 'u' && len(s) >= 6:
		v, err := strconv.ParseUint(s[2:6], 16, 16)
		if err != nil {
			return nil, 0
		}
		r := rune(v)
		if r >= 0xd800 && r < 0xdc00 && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if lo, err := strconv.ParseUint(s[8:12], 16, 16); err == nil && lo >= 0xdc00 && lo < 0xe000 {
				return utf8Rune((r-0xd800)<<10 | (rune(lo) - 0xdc00) + 0x10000), 12
			}
		}
		return utf8Rune(r), 6
	case c == 'U' && len(s) >= 10:
		if v, err := strconv.ParseUint(s[2:10], 16, 32); err == nil {
			return utf8Rune(rune(v)), 10
		}
	}
	return nil, 0
}

// utf8Rune is r in UTF-8 (U+FFFD for a surrogate or a value beyond
// Unicode, as encoding/json decodes them).
func utf8Rune(r rune) []byte {
	return []byte(string(r))
}

// replaceSpans returns text with each range of spans, merged where they
// overlap or touch, replaced by Redacted.
func replaceSpans(text string, spans []span) string {
	if len(spans) == 0 {
		return text
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	var b strings.Builder
	at := 0
	for i := 0; i < len(spans); {
		s := spans[i]
		for i++; i < len(spans) && spans[i].start <= s.end; i++ {
			s.end = max(s.end, spans[i].end)
		}
		b.WriteString(text[at:s.start])
		b.WriteString(Redacted)
		at = s.end
	}
	b.WriteString(text[at:])
	return b.String()
}

// resolve follows an RFC 6901 JSON Pointer in doc.
func resolve(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	if ptr[0] != '/' {
		return nil, false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch node := doc.(type) {
		case map[string]any:
			v, ok := node[tok]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			doc = node[i]
		default:
			return nil, false
		}
	}
	return doc, true
}
