package canonical

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// parser writes the canonical form of the JSON value at in[pos:] to out,
// in one pass over the bytes (RFC 8259's grammar, as encoding/json reads
// it): a value's canonical bytes are appended as it is read, and an
// object's members, once all are read, are put in key order in place.
type parser struct {
	in  []byte
	pos int
	out []byte
	// scratch holds an object's members while they are reordered, and
	// unescaped strings; reused.
	scratch []byte
}

// member is one object member as written to out: its unescaped key
// (a slice of in when it had no escape) and its canonical value at
// out[start:end].
type member struct {
	key        []byte
	start, end int
}

// errEnd is the error of input that ends inside a value.
var errEnd = errors.New("unexpected end of JSON input")

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: "+format, append([]any{p.pos}, args...)...)
}

// badChar is the error of an unexpected byte at pos.
func (p *parser) badChar(context string) error {
	if p.pos >= len(p.in) {
		return errEnd
	}
	r, _ := utf8.DecodeRune(p.in[p.pos:])
	return p.errorf("invalid character %q %s", r, context)
}

// space skips JSON whitespace.
func (p *parser) space() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// MaxDepth bounds how deeply arrays and objects may nest: a value inside
// MaxDepth of them is the deepest canonicalized (the TypeScript client's
// bound, and encoding/json's).
const MaxDepth = 10000

// value reads one value, inside depth arrays and objects; whitespace
// before it is skipped already.
func (p *parser) value(depth int) error {
	if depth > MaxDepth {
		return p.errorf("nested deeper than %d arrays and objects", MaxDepth)
	}
	if p.pos >= len(p.in) {
		return errEnd
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, _, err := p.string()
		if err != nil {
			return err
		}
		p.out = appendString(p.out, s)
		return nil
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return p.badChar("looking for the beginning of a value")
}

func (p *parser) literal(word string) error {
	for i := 0; i < len(word); i++ {
		if p.pos >= len(p.in) {
			return errEnd
		}
		if p.in[p.pos] != word[i] {
			return p.badChar("in literal " + word)
		}
		p.pos++
	}
	p.out = append(p.out, word...)
	return nil
}

// next skips whitespace and returns the byte after it, at pos.
func (p *parser) next() (byte, error) {
	p.space()
	if p.pos >= len(p.in) {
		return 0, errEnd
	}
	return p.in[p.pos], nil
}

func (p *parser) array(depth int) error {
	p.pos++ // '['
	p.out = append(p.out, '[')
	if c, err := p.next(); err != nil {
		return err
	} else if c == ']' {
		p.pos++
		p.out = append(p.out, ']')
		return nil
	}
	for {
		if err := p.value(depth + 1); err != nil {
			return err
		}
		c, err := p.next()
		if err != nil {
			return err
		}
		p.pos++
		switch c {
		case ',':
			p.out = append(p.out, ',')
			p.space()
		case ']':
			p.out = append(p.out, ']')
			return nil
		default:
			p.pos--
			return p.badChar("after an array element")
		}
	}
}

func (p *parser) object(depth int) error {
	p.pos++ // '{'
	start := len(p.out)
	if c, err := p.next(); err != nil {
		return err
	} else if c == '}' {
		p.pos++
		p.out = append(p.out, "{}"...)
		return nil
	}
	// The values are written to out as they are read, without their keys;
	// the object is then rewritten in key order.
	var members []member
	for {
		if c, err := p.next(); err != nil {
			return err
		} else if c != '"' {
			return p.badChar("looking for the beginning of an object key")
		}
		key, inScratch, err := p.string()
		if err != nil {
			return err
		}
		if inScratch {
			key = bytes.Clone(key) // later strings reuse the scratch
		}
		if c, err := p.next(); err != nil {
			return err
		} else if c != ':' {
			return p.badChar("after an object key")
		}
		p.pos++
		p.space()
		m := member{key: key, start: len(p.out)}
		if err := p.value(depth + 1); err != nil {
			return err
		}
		m.end = len(p.out)
		members = append(members, m)
		c, err := p.next()
		if err != nil {
			return err
		}
		if c == '}' {
			p.pos++
			break
		}
		if c != ',' {
			return p.badChar("after an object member")
		}
		p.pos++
	}
	// RFC 8785 sorts keys by their UTF-16 code units. A stable sort makes
	// the first of two equal keys the first in the input.
	slices.SortStableFunc(members, func(a, b member) int { return compareUTF16(a.key, b.key) })
	for i := 1; i < len(members); i++ {
		if bytes.Equal(members[i-1].key, members[i].key) {
			return fmt.Errorf("duplicate object key %q", members[i].key)
		}
	}
	values := append(p.scratch[:0], p.out[start:]...)
	p.out = append(p.out[:start], '{')
	for i, m := range members {
		if i > 0 {
			p.out = append(p.out, ',')
		}
		p.out = appendString(p.out, m.key)
		p.out = append(p.out, ':')
		p.out = append(p.out, values[m.start-start:m.end-start]...)
	}
	p.out = append(p.out, '}')
	p.scratch = values[:0]
	return nil
}

// string reads a string at pos (its opening quote) and returns it
// unescaped: a slice of in when it has no escape, else (inScratch) of
// scratch. As encoding/json, it takes a \u escape of half a surrogate
// pair that is not followed by the other half as U+FFFD.
func (p *parser) string() (s []byte, inScratch bool, err error) {
	p.pos++ // '"'
	begin := p.pos
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return p.in[begin : p.pos-1], false, nil
		case c == '\\':
			s, err := p.escaped(begin)
			return s, true, err
		case c < 0x20:
			return nil, false, p.badChar("in a string literal")
		}
		p.pos++
	}
	return nil, false, errEnd
}

// escaped reads the rest of a string that has an escape at pos, whose
// characters began at begin.
func (p *parser) escaped(begin int) ([]byte, error) {
	s := append(p.scratch[:0], p.in[begin:p.pos]...)
	defer func() { p.scratch = s[:0] }()
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return s, nil
		case c < 0x20:
			return nil, p.badChar("in a string literal")
		case c != '\\':
			s = append(s, c)
			p.pos++
			continue
		}
		p.pos++ // '\\'
		if p.pos >= len(p.in) {
			return nil, errEnd
		}
		switch e := p.in[p.pos]; e {
		case '"', '\\', '/':
			s = append(s, e)
		case 'b':
			s = append(s, '\b')
		case 'f':
			s = append(s, '\f')
		case 'n':
			s = append(s, '\n')
		case 'r':
			s = append(s, '\r')
		case 't':
			s = append(s, '\t')
		case 'u':
			r, err := p.hex4(p.pos + 1)
			if err != nil {
				return nil, err
			}
			p.pos += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := p.pairHalf(p.pos + 1); ok {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						p.pos += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			s = utf8.AppendRune(s, r)
		default:
			return nil, p.badChar("in a string escape code")
		}
		p.pos++
	}
	return nil, errEnd
}

// hex4 reads the four hex digits of a \u escape at i.
func (p *parser) hex4(i int) (rune, error) {
	for k := range 4 {
		if i+k >= len(p.in) {
			p.pos = len(p.in)
			return 0, errEnd
		}
		if _, ok := hexValue(p.in[i+k]); !ok {
			p.pos = i + k
			return 0, p.badChar("in a \\u hexadecimal character escape")
		}
	}
	return hexRune(p.in[i : i+4]), nil
}

// pairHalf reads a \u escape at i, if one is there, without moving.
func (p *parser) pairHalf(i int) (rune, bool) {
	if i+6 > len(p.in) || p.in[i] != '\\' || p.in[i+1] != 'u' {
		return 0, false
	}
	for _, c := range p.in[i+2 : i+6] {
		if _, ok := hexValue(c); !ok {
			return 0, false
		}
	}
	return hexRune(p.in[i+2 : i+6]), true
}

// hexRune is the value of hex digits, checked.
func hexRune(digits []byte) rune {
	var r rune
	for _, c := range digits {
		v, _ := hexValue(c)
		r = r<<4 | rune(v)
	}
	return r
}

// hexValue is the value of a hex digit (ok false: c is not one).
func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// number reads a number (RFC 8259's grammar) and writes it as a double.
func (p *parser) number() error {
	begin := p.pos
	if p.in[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.in) && '0' <= p.in[p.pos] && p.in[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	switch {
	case p.pos >= len(p.in):
		return errEnd
	case p.in[p.pos] == '0':
		p.pos++
	case '1' <= p.in[p.pos] && p.in[p.pos] <= '9':
		digits()
	default:
		return p.badChar("in numeric literal")
	}
	if p.pos < len(p.in) && p.in[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return p.badChar("after decimal point in numeric literal")
		}
	}
	if p.pos < len(p.in) && (p.in[p.pos] == 'e' || p.in[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.in) && (p.in[p.pos] == '+' || p.in[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return p.badChar("in exponent of numeric literal")
		}
	}
	text := p.in[begin:p.pos]
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil || math.IsInf(f, 0) {
		return fmt.Errorf("number %s is outside the IEEE 754 double range", text)
	}
	p.out = append(p.out, formatNumber(f)...)
	return nil
}

// compareUTF16 orders a and b, valid UTF-8, by their UTF-16 code units.
// Code points order as their UTF-8 bytes do; only a character beyond
// U+FFFF (two units, the first from U+D800) against one from U+E000 to
// U+FFFF orders otherwise.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb {
			ua, ub := firstUnit(ra), firstUnit(rb)
			if ua != ub {
				return int(ua) - int(ub)
			}
			return int(ra) - int(rb) // one high surrogate: the low ones order as the runes
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xd800 + (r-0x10000)>>10
}
