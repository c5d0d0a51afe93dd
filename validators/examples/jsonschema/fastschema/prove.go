package fastschema

import (
	"encoding/json"
	"math"
	"unicode/utf8"
)

// Schema is a compiled schema.
type Schema struct {
	root *node
}

// Proves reports whether doc is one JSON value, valid against the schema.
// It reads doc once, without decoding it into Go values. False means "not
// proven": doc is invalid, or holds something this package does not decide
// (a duplicate key, invalid UTF-8, a number it cannot compare exactly);
// ask a full validator then.
func (s *Schema) Proves(doc []byte) bool {
	var scratch [8][]byte // most objects have a few keys
	p := prover{doc: doc, keys: scratch[:0]}
	p.skipSpace()
	if !p.value(s.root) {
		return false
	}
	p.skipSpace()
	return p.i == len(doc)
}

// prover walks a document. Each method that reads a value leaves i just
// after it and returns false as soon as it cannot prove the value valid.
type prover struct {
	doc []byte
	i   int
	// keys is scratch space for an object's keys, to find duplicates.
	keys [][]byte
	// depth is how deep in arrays and objects i is.
	depth int
}

// maxDepth is as deep as a document may nest here: far below where
// encoding/json refuses to go (10,000), so that what is proven here is
// never refused there.
const maxDepth = 1000

func (p *prover) skipSpace() {
	doc, i := p.doc, p.i
	for i < len(doc) && isSpace[doc[i]] {
		i++
	}
	p.i = i
}

// value proves the value at i valid against n (nil: any valid JSON).
func (p *prover) value(n *node) bool {
	if p.i >= len(p.doc) {
		return false
	}
	if n != nil && n.never {
		return false
	}
	start := p.i
	t := kindOf[p.doc[p.i]]
	if t == 0 {
		return false
	}
	// The document's own keywords first, then the applicators, which read
	// the same value again from start.
	var ok bool
	switch t {
	case typeObject:
		ok = p.object(n)
	case typeArray:
		ok = p.array(n)
	case typeString:
		ok = p.stringValue(n)
	case typeNumber:
		ok = p.number(n)
	default:
		ok = p.literal(n)
	}
	if !ok {
		return false
	}
	if n == nil || !n.hasApplicators() {
		return true
	}
	end := p.i
	for _, sub := range n.allOf {
		if !p.again(sub, start) {
			return false
		}
	}
	if len(n.anyOf) > 0 {
		held := false
		for _, sub := range n.anyOf {
			if p.again(sub, start) {
				held = true
				break
			}
		}
		if !held {
			return false
		}
	}
	if len(n.oneOf) > 0 {
		// Exactly one must hold; "not proven" for another is not proof
		// that it fails, so only a oneOf of one subschema is decided.
		if len(n.oneOf) != 1 || !p.again(n.oneOf[0], start) {
			return false
		}
	}
	if n.not != nil {
		// Proving not needs a proof that the subschema fails; not decided.
		return false
	}
	p.i = end
	return true
}

func (n *node) hasApplicators() bool {
	return len(n.allOf) > 0 || len(n.anyOf) > 0 || len(n.oneOf) > 0 || n.not != nil
}

// again proves the value at start valid against n.
func (p *prover) again(n *node, start int) bool {
	// A branch that failed part way must leave no keys or depth behind.
	keys, depth := len(p.keys), p.depth
	p.i = start
	ok := p.value(n)
	p.keys, p.depth = p.keys[:keys], depth
	return ok
}

// literal reads true, false or null.
func (p *prover) literal(n *node) bool {
	var word string
	var sc scalar
	switch p.doc[p.i] {
	case 't':
		word, sc = "true", scalar{kind: typeBoolean, b: true}
	case 'f':
		word, sc = "false", scalar{kind: typeBoolean}
	default:
		word, sc = "null", scalar{kind: typeNull}
	}
	if len(p.doc)-p.i < len(word) || string(p.doc[p.i:p.i+len(word)]) != word {
		return false
	}
	p.i += len(word)
	if n == nil {
		return true
	}
	if n.types != 0 && n.types&sc.kind == 0 {
		return false
	}
	if n.enum != nil {
		for _, e := range n.enum {
			if e.kind == sc.kind && e.b == sc.b {
				return true
			}
		}
		return false
	}
	return true
}

// number reads a number and proves it against n's type, bounds,
// multipleOf and enum.
func (p *prover) number(n *node) bool {
	doc, i := p.doc, p.i
	start := i
	neg := doc[i] == '-'
	if neg {
		i++
	}
	// The integer part, accumulated as it is read: most numbers in a
	// config are small integers, which need nothing more.
	var mantissa int64
	digitsStart := i
	for i < len(doc) && isDigit[doc[i]] {
		if i-digitsStart < maxExactDigits {
			mantissa = mantissa*10 + int64(doc[i]-'0')
		}
		i++
	}
	switch {
	case i == digitsStart:
		return false
	case doc[digitsStart] == '0' && i-digitsStart > 1:
		return false // a leading zero
	}
	integer := i-digitsStart <= maxExactDigits
	if i < len(doc) && (doc[i] == '.' || doc[i] == 'e' || doc[i] == 'E') {
		integer = false
		p.i = i
		if doc[i] == '.' {
			p.i++
			if !p.digits() {
				return false
			}
		}
		if p.i < len(p.doc) && (p.doc[p.i] == 'e' || p.doc[p.i] == 'E') {
			p.i++
			if p.i < len(p.doc) && (p.doc[p.i] == '+' || p.doc[p.i] == '-') {
				p.i++
			}
			if !p.digits() {
				return false
			}
		}
		i = p.i
	}
	p.i = i
	if n == nil {
		return true
	}
	if n.types == 0 && n.minimum == nil && n.maximum == nil && n.exclusiveMinimum == nil &&
		n.exclusiveMaximum == nil && n.multipleOf == nil && n.enum == nil {
		return true
	}
	var v number
	if integer {
		if neg {
			mantissa = -mantissa
		}
		v = number{f: float64(mantissa), exact: true}
	} else {
		var ok bool
		if v, ok = parseNumber(doc[start:i]); !ok {
			return false
		}
	}
	if n.types != 0 && n.types&typeNumber == 0 {
		// Only "integer" can hold a number now; 1.0 is an integer too,
		// but that is not decided here.
		if n.types&typeInteger == 0 || !v.exact {
			return false
		}
	}
	// Each bound holds when the order of the two float64s proves it: a
	// float64 rounds each literal to the nearest, keeping their order
	// where they differ. Equal float64s decide only when both are exact.
	switch {
	case n.minimum != nil && !atLeast(v, *n.minimum, false),
		n.maximum != nil && !atLeast(*n.maximum, v, false),
		n.exclusiveMinimum != nil && !atLeast(v, *n.exclusiveMinimum, true),
		n.exclusiveMaximum != nil && !atLeast(*n.exclusiveMaximum, v, true):
		return false
	}
	if m := n.multipleOf; m != nil {
		if !m.exact || !v.exact || m.f == 0 || math.Mod(v.f, m.f) != 0 {
			return false
		}
	}
	if n.enum != nil {
		for _, e := range n.enum {
			if e.kind == typeNumber && v.exact && e.n.f == v.f {
				return true
			}
		}
		return false
	}
	return true
}

// atLeast proves a >= b (a > b when strict).
func atLeast(a, b number, strict bool) bool {
	if a.f != b.f {
		return a.f > b.f
	}
	return !strict && a.exact && b.exact
}

// digits reads one or more digits.
func (p *prover) digits() bool {
	doc, i := p.doc, p.i
	for i < len(doc) && isDigit[doc[i]] {
		i++
	}
	ok := i > p.i
	p.i = i
	return ok
}

// Byte classes, looked up rather than compared: in Go's wasm code each
// taken branch costs a trip through the function's dispatch loop.
var isDigit, plainInString, isSpace [256]bool

// kindOf is the JSON type of a value by its first byte (0: none).
var kindOf [256]uint8

func init() {
	kindOf['{'], kindOf['['], kindOf['"'] = typeObject, typeArray, typeString
	kindOf['t'], kindOf['f'], kindOf['n'] = typeBoolean, typeBoolean, typeNull
	kindOf['-'] = typeNumber
	for c := '0'; c <= '9'; c++ {
		isDigit[c], kindOf[c] = true, typeNumber
	}
	for c := 0x20; c < utf8.RuneSelf; c++ {
		plainInString[c] = c != '"' && c != '\\'
	}
	for _, c := range " \t\n\r" {
		isSpace[c] = true
	}
}

// rawString reads a string and returns its bytes between the quotes, and
// whether it holds escapes.
func (p *prover) rawString() (raw []byte, escaped, ok bool) {
	p.i++ // the opening quote
	start := p.i
	// Plain ASCII runs in a tight loop on locals: most of a config is
	// there, and Go's wasm code keeps locals out of memory.
	doc, i := p.doc, p.i
	for i < len(doc) && plainInString[doc[i]] {
		i++
	}
	if i < len(doc) && doc[i] == '"' { // the common case: plain ASCII
		p.i = i + 1
		return doc[start:i], false, true
	}
	p.i = i
	for p.i < len(p.doc) {
		c := p.doc[p.i]
		switch {
		case c == '"':
			raw = p.doc[start:p.i]
			p.i++
			return raw, escaped, true
		case c == '\\':
			escaped = true
			p.i++
			if p.i >= len(p.doc) {
				return nil, false, false
			}
			switch p.doc[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				if len(p.doc)-p.i < 5 {
					return nil, false, false
				}
				for _, h := range p.doc[p.i+1 : p.i+5] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				p.i += 5
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		case c >= utf8.RuneSelf:
			// Invalid UTF-8 is replaced by the decoder of a full
			// validator; not decided here.
			r, size := utf8.DecodeRune(p.doc[p.i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false, false
			}
			p.i += size
		default:
			p.i++
		}
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// decoded returns a string's value.
func decoded(raw []byte, escaped bool) (string, bool) {
	if !escaped {
		return string(raw), true
	}
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", false
	}
	return s, true
}

// stringValue reads a string and proves it against n.
func (p *prover) stringValue(n *node) bool {
	raw, escaped, ok := p.rawString()
	if !ok {
		return false
	}
	if n == nil {
		return true
	}
	if n.types != 0 && n.types&typeString == 0 {
		return false
	}
	if n.minLength < 0 && n.maxLength < 0 && n.pattern == nil && n.enum == nil {
		return true
	}
	var s string
	if escaped {
		if s, ok = decoded(raw, true); !ok {
			return false
		}
	}
	length := 0
	if n.minLength >= 0 || n.maxLength >= 0 {
		switch {
		case escaped:
			length = utf8.RuneCountInString(s)
		case n.minLength <= 0 && len(raw) <= n.maxLength:
			length = len(raw) // no more runes than bytes: within the bound
		default:
			length = utf8.RuneCount(raw)
		}
		if length < n.minLength || (n.maxLength >= 0 && length > n.maxLength) {
			return false
		}
	}
	if n.pattern != nil {
		if escaped && !n.pattern.MatchString(s) || !escaped && !n.pattern.Match(raw) {
			return false
		}
	}
	if n.enum != nil {
		for _, e := range n.enum {
			if e.kind == typeString && (escaped && e.s == s || !escaped && e.s == string(raw)) {
				return true
			}
		}
		return false
	}
	return true
}

// array reads an array and proves it against n.
func (p *prover) array(n *node) bool {
	if !p.enter(n, typeArray) {
		return false
	}
	count := 0
	var seen [][]byte // for uniqueItems
	if p.i < len(p.doc) && p.doc[p.i] == ']' {
		p.i++
	} else {
		for {
			var item *node
			if n != nil {
				if count < len(n.prefixItems) {
					item = n.prefixItems[count]
				} else {
					item = n.items
				}
			}
			start := p.i
			if !p.value(item) {
				return false
			}
			if n != nil && n.uniqueItems {
				// Items are told apart by their bytes where equal
				// bytes and equal values are the same thing: strings
				// without escapes, integers without a fraction or
				// exponent (where "1" and "-0" could still meet "1.0"
				// and "0", none is written so), true, false, null.
				item := p.doc[start:p.i]
				if !plainItem(item) {
					return false
				}
				for _, seen := range seen {
					if string(seen) == string(item) {
						return false
					}
				}
				seen = append(seen, item)
			}
			count++
			if more, ok := p.next(']'); !ok {
				return false
			} else if !more {
				break
			}
		}
	}
	p.depth--
	if n == nil {
		return true
	}
	return count >= n.minItems && (n.maxItems < 0 || count <= n.maxItems)
}

// plainItem reports whether an array item's bytes are its identity: a
// string without escapes, an integer written without a fraction or an
// exponent (and not "-0", which equals 0), or a literal.
func plainItem(item []byte) bool {
	switch c := item[0]; {
	case c == '"':
		for _, b := range item {
			if b == '\\' {
				return false
			}
		}
		return true
	case c == '-' || isDigit[c]:
		if string(item) == "-0" {
			return false
		}
		for _, b := range item[1:] {
			if !isDigit[b] {
				return false
			}
		}
		return true
	default:
		return c == 't' || c == 'f' || c == 'n'
	}
}

// enter checks an array's or object's type (t) against n, and steps
// inside it.
func (p *prover) enter(n *node, t uint8) bool {
	if n != nil && (n.types != 0 && n.types&t == 0 || n.enum != nil) {
		return false // an enum of arrays or objects is not compiled
	}
	if p.depth++; p.depth > maxDepth {
		return false
	}
	p.i++ // [ or {
	p.skipSpace()
	return true
}

// next reads what follows a member of an array or object: a comma (more
// is true) or the closing byte. ok is false for anything else.
func (p *prover) next(closing byte) (more, ok bool) {
	p.skipSpace()
	if p.i >= len(p.doc) {
		return false, false
	}
	switch p.doc[p.i] {
	case closing:
		p.i++
		return false, true
	case ',':
		p.i++
		p.skipSpace()
		return true, true
	}
	return false, false
}

// object reads an object and proves it against n.
func (p *prover) object(n *node) bool {
	if !p.enter(n, typeObject) {
		return false
	}
	base := len(p.keys)
	if p.i < len(p.doc) && p.doc[p.i] == '}' {
		p.i++
	} else {
		for {
			if p.i >= len(p.doc) || p.doc[p.i] != '"' {
				return false
			}
			raw, escaped, ok := p.rawString()
			if !ok || escaped { // an escaped name is not decided here
				return false
			}
			for _, k := range p.keys[base:] {
				if string(k) == string(raw) {
					return false // a duplicate name: the last would win
				}
			}
			p.keys = append(p.keys, raw)
			p.skipSpace()
			if p.i >= len(p.doc) || p.doc[p.i] != ':' {
				return false
			}
			p.i++
			p.skipSpace()
			if !p.value(p.propertySchema(n, raw)) {
				return false
			}
			if more, ok := p.next('}'); !ok {
				return false
			} else if !more {
				break
			}
		}
	}
	p.depth--
	keys := p.keys[base:]
	p.keys = p.keys[:base] // the slice above still holds them
	if n == nil {
		return true
	}
	count := len(keys)
	if count < n.minProperties || (n.maxProperties >= 0 && count > n.maxProperties) {
		return false
	}
	for _, r := range n.required {
		found := false
		for _, k := range keys {
			if string(k) == r {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// propertySchema returns the one schema a property's value must satisfy,
// or, where several apply (properties and patternProperties both match),
// a node holding them all.
func (p *prover) propertySchema(n *node, name []byte) *node {
	if n == nil {
		return nil
	}
	sub, named := n.properties[string(name)]
	if len(n.patternProperties) == 0 {
		if named {
			return sub
		}
		return n.additionalProperties // nil: anything
	}
	var matched []*node
	if named {
		matched = append(matched, sub)
	}
	for _, pp := range n.patternProperties {
		if pp.re.Match(name) {
			matched = append(matched, pp.node)
		}
	}
	switch len(matched) {
	case 0:
		return n.additionalProperties // nil: anything
	case 1:
		return matched[0]
	default:
		return &node{allOf: matched, minLength: -1, maxLength: -1, maxItems: -1, maxProperties: -1}
	}
}
