package fastschema

import (
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// draft2020 is the only $schema this package accepts: other drafts give
// some keywords other meanings.
const draft2020 = "https://json-schema.org/draft/2020-12/schema"

// annotations are keywords that never change a verdict (format is an
// annotation in 2020-12 unless a validator is told to assert it).
var annotations = map[string]bool{
	"$comment": true, "title": true, "description": true, "default": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "format": true,
	"$defs": true, "definitions": true, // compiled when a $ref points there
}

// Type bits of node.types.
const (
	typeNull uint8 = 1 << iota
	typeBoolean
	typeObject
	typeArray
	typeNumber
	typeInteger
	typeString
)

var typeNames = map[string]uint8{
	"null": typeNull, "boolean": typeBoolean, "object": typeObject, "array": typeArray,
	"number": typeNumber, "integer": typeInteger, "string": typeString,
}

// number is a number from a schema or a document: its value as a float64,
// and whether it was written as an integer of at most 15 digits, which the
// float64 holds exactly. Only such numbers are known to be integers and
// compared for equality here.
type number struct {
	f     float64
	exact bool
}

// node is one compiled schema object.
type node struct {
	never bool  // the schema false
	types uint8 // 0: any type

	minimum, maximum, exclusiveMinimum, exclusiveMaximum *number
	multipleOf                                           *number

	minLength, maxLength int // -1: none
	pattern              *regexp.Regexp

	prefixItems        []*node
	items              *node
	minItems, maxItems int
	uniqueItems        bool

	properties           map[string]*node
	required             []string
	patternProperties    []patternProperty
	additionalProperties *node
	minProperties        int
	maxProperties        int

	enum []scalar // nil: no enum; a const is an enum of one

	allOf, anyOf, oneOf []*node
	not                 *node
}

type patternProperty struct {
	re   *regexp.Regexp
	node *node
}

// scalar is an enum or const value: null, a boolean, a number or a string.
type scalar struct {
	kind uint8 // typeNull, typeBoolean, typeNumber, typeString
	b    bool
	n    number
	s    string
}

// compiler turns a schema document into nodes; ok turns false at the
// first thing it does not handle.
type compiler struct {
	root  map[string]any
	refs  map[string]*node // by JSON pointer, for $ref
	ok    bool
	depth int
}

// Compile compiles schema, a JSON Schema (draft 2020-12) document. It
// returns nil when the schema uses a keyword or a form this package does
// not handle: then every document must go to a full validator.
func Compile(schema []byte) *Schema {
	dec := json.NewDecoder(strings.NewReader(string(schema)))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil
	}
	c := &compiler{refs: map[string]*node{}, ok: true}
	if m, ok := doc.(map[string]any); ok {
		c.root = m
		if s, ok := m["$schema"]; ok && s != draft2020 {
			return nil
		}
	}
	n := &node{}
	c.refs[""] = n
	c.fill(n, doc, true)
	if !c.ok {
		return nil
	}
	return &Schema{root: n}
}

// compile compiles a subschema.
func (c *compiler) compile(v any) *node {
	n := &node{}
	c.fill(n, v, false)
	return n
}

func (c *compiler) fail() { c.ok = false }

// fill compiles v into n.
func (c *compiler) fill(n *node, v any, root bool) {
	n.minLength, n.maxLength, n.maxItems, n.maxProperties = -1, -1, -1, -1
	if c.depth++; c.depth > 64 {
		c.fail()
		return
	}
	defer func() { c.depth-- }()
	switch v := v.(type) {
	case bool:
		n.never = !v
		return
	case map[string]any:
		for k, kv := range v {
			if !c.ok {
				return
			}
			c.keyword(n, k, kv, root)
		}
	default:
		c.fail()
	}
}

// keyword compiles one keyword of a schema object.
func (c *compiler) keyword(n *node, k string, v any, root bool) {
	switch k {
	case "$schema", "$id":
		if !root {
			c.fail()
		}
	case "type":
		c.types(n, v)
	case "minimum":
		n.minimum = c.number(v)
	case "maximum":
		n.maximum = c.number(v)
	case "exclusiveMinimum":
		n.exclusiveMinimum = c.number(v)
	case "exclusiveMaximum":
		n.exclusiveMaximum = c.number(v)
	case "multipleOf":
		n.multipleOf = c.number(v)
	case "minLength":
		n.minLength = c.count(v)
	case "maxLength":
		n.maxLength = c.count(v)
	case "minItems":
		n.minItems = c.count(v)
	case "maxItems":
		n.maxItems = c.count(v)
	case "uniqueItems":
		b, ok := v.(bool)
		if !ok {
			c.fail()
		}
		n.uniqueItems = b
	case "minProperties":
		n.minProperties = c.count(v)
	case "maxProperties":
		n.maxProperties = c.count(v)
	case "pattern":
		n.pattern = c.regexp(v)
	case "items":
		n.items = c.compile(v)
	case "prefixItems":
		n.prefixItems = c.list(v)
	case "properties":
		m, ok := v.(map[string]any)
		if !ok {
			c.fail()
			return
		}
		n.properties = make(map[string]*node, len(m))
		for name, sv := range m {
			n.properties[name] = c.compile(sv)
		}
	case "patternProperties":
		m, ok := v.(map[string]any)
		if !ok {
			c.fail()
			return
		}
		for p, sv := range m {
			n.patternProperties = append(n.patternProperties, patternProperty{re: c.regexp(p), node: c.compile(sv)})
		}
	case "additionalProperties":
		n.additionalProperties = c.compile(v)
	case "required":
		list, ok := v.([]any)
		if !ok {
			c.fail()
			return
		}
		for _, r := range list {
			s, ok := r.(string)
			if !ok {
				c.fail()
				return
			}
			n.required = append(n.required, s)
		}
	case "enum":
		list, ok := v.([]any)
		if !ok {
			c.fail()
			return
		}
		n.enum = make([]scalar, 0, len(list))
		for _, e := range list {
			n.enum = append(n.enum, c.scalar(e))
		}
	case "const":
		n.enum = []scalar{c.scalar(v)}
	case "allOf":
		n.allOf = c.list(v)
	case "anyOf":
		n.anyOf = c.list(v)
	case "oneOf":
		n.oneOf = c.list(v)
	case "not":
		n.not = c.compile(v)
	case "$ref":
		// In 2020-12 a $ref applies beside its siblings, like allOf.
		n.allOf = append(n.allOf, c.ref(v))
	default:
		if !annotations[k] {
			c.fail()
		}
	}
}

func (c *compiler) types(n *node, v any) {
	var names []any
	switch v := v.(type) {
	case string:
		names = []any{v}
	case []any:
		names = v
	default:
		c.fail()
		return
	}
	for _, name := range names {
		s, _ := name.(string)
		bit, ok := typeNames[s]
		if !ok {
			c.fail()
			return
		}
		n.types |= bit
	}
	if n.types == 0 { // "type": [] allows nothing
		n.never = true
	}
}

func (c *compiler) list(v any) []*node {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		c.fail()
		return nil
	}
	out := make([]*node, len(list))
	for i, sv := range list {
		out[i] = c.compile(sv)
	}
	return out
}

// ref resolves a $ref to a place in the same document: "#" or a JSON
// pointer such as "#/$defs/name". Anything else (another document, an
// anchor) is not handled.
func (c *compiler) ref(v any) *node {
	s, ok := v.(string)
	if !ok || !strings.HasPrefix(s, "#") || c.root == nil {
		c.fail()
		return &node{}
	}
	ptr := s[1:]
	if n, ok := c.refs[ptr]; ok {
		return n
	}
	if !strings.HasPrefix(ptr, "/") || strings.ContainsAny(ptr, "%~") {
		c.fail()
		return &node{}
	}
	var target any = c.root
	for _, part := range strings.Split(ptr[1:], "/") {
		m, ok := target.(map[string]any)
		if !ok {
			c.fail()
			return &node{}
		}
		if target, ok = m[part]; !ok {
			c.fail()
			return &node{}
		}
	}
	n := &node{}
	c.refs[ptr] = n // before filling: a recursive schema refers to itself
	c.fill(n, target, false)
	return n
}

func (c *compiler) regexp(v any) *regexp.Regexp {
	s, ok := v.(string)
	if !ok {
		c.fail()
		return nil
	}
	re, err := regexp.Compile(s)
	if err != nil {
		c.fail()
		return nil
	}
	return re
}

func (c *compiler) count(v any) int {
	num, ok := v.(json.Number)
	if !ok {
		c.fail()
		return 0
	}
	n, err := strconv.Atoi(string(num))
	if err != nil || n < 0 {
		c.fail()
		return 0
	}
	return n
}

func (c *compiler) number(v any) *number {
	num, ok := v.(json.Number)
	if !ok {
		c.fail()
		return nil
	}
	n, ok := parseNumber([]byte(num))
	if !ok {
		c.fail()
		return nil
	}
	return &n
}

func (c *compiler) scalar(v any) scalar {
	switch v := v.(type) {
	case nil:
		return scalar{kind: typeNull}
	case bool:
		return scalar{kind: typeBoolean, b: v}
	case string:
		return scalar{kind: typeString, s: v}
	case json.Number:
		n, ok := parseNumber([]byte(v))
		if !ok || !n.exact {
			c.fail()
		}
		return scalar{kind: typeNumber, n: n}
	default: // objects and arrays in an enum are not handled
		c.fail()
		return scalar{}
	}
}

// maxExactDigits is how many digits an integer literal may have and still
// be a float64 exactly (2^53 has 16).
const maxExactDigits = 15

// parseNumber reads a JSON number literal. exact says the float64 is the
// literal's value: an integer literal of at most 15 digits.
func parseNumber(lit []byte) (number, bool) {
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		return number{}, false
	}
	digits := len(lit)
	if len(lit) > 0 && lit[0] == '-' {
		digits--
	}
	integer := digits <= maxExactDigits
	for _, b := range lit {
		if b == '.' || b == 'e' || b == 'E' {
			integer = false
		}
	}
	return number{f: f, exact: integer}, true
}
