package fastschema

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// full compiles schema with the full validator the fast path stands in
// front of, as the jsonschema example does.
func full(t testing.TB, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("pawl:schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("pawl:schema.json")
	if err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	return s
}

func fullValid(s *jsonschema.Schema, doc []byte) bool {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	return err == nil && s.Validate(v) == nil
}

const routing = `{"type":"object","required":["items"],"properties":{"items":{"type":"array","items":{
  "type":"object","required":["id","name","weight"],"additionalProperties":false,
  "properties":{"id":{"type":"integer","minimum":0},"name":{"type":"string","maxLength":64},"weight":{"type":"number","minimum":0,"maximum":100}}}}}}`

// cases are schemas with documents: proven lists those the fast path must
// prove (each valid), others those it may or may not (it must never prove
// one the full validator refuses).
var cases = []struct {
	schema string
	proven []string
	others []string
}{
	{routing,
		[]string{`{"items":[]}`, `{"items":[{"id":1,"name":"a","weight":0.5}]}`, ` {"items":[{"id":0,"name":"","weight":100}] } `,
			`{"items":[{"id":123456789012345,"name":"\u00e9t\u00e9","weight":1e1}],"other":{"x":[1,{"y":null}]}}`},
		[]string{`{"items":[{"id":-1,"name":"a","weight":1}]}`, `{"items":[{"id":1.5,"name":"a","weight":1}]}`,
			`{"items":[{"id":1.0,"name":"a","weight":1}]}`, `{"items":[{"id":1,"name":"a","weight":100.0000000000000001}]}`,
			`{"items":[{"id":1,"name":"a","weight":100.000001}]}`, `{"items":[{"id":1,"name":"a"}]}`,
			`{"items":[{"id":1,"name":"a","weight":1,"x":2}]}`, `{"items":[{"id":1,"id":2,"name":"a","weight":1}]}`,
			`{"items":[{"id":1,"name":"` + strings.Repeat("é", 65) + `","weight":1}]}`,
			`{"items":[{"id":1,"name":"` + strings.Repeat("é", 64) + `","weight":1}]}`,
			`{"items":[{"id":1,"name":"` + strings.Repeat(`\u00e9`, 65) + `","weight":1}]}`,
			`{"items":[{"id":12345678901234567890,"name":"a","weight":1}]}`, `{"items":{}}`, `[]`, `{"items":[]} x`,
			`{"items":[]}{}`, `{"items":[01]}`, `{"items":[1.]}`, `{"items":[-]}`, `{"items":[1e]}`, `{"items":["\x"]}`,
			"{\"items\":[\"\x01\"]}", "{\"items\":[\"\xff\"]}", `{"items":[tru]}`, `{"items":[],}`, `{"items":[1,]}`, ``, `{`,
			`{"it\u0065ms":[]}`, `{"items":[{"id":1,"name":"a","weight":-0}]}`, `{"items":[{"id":-0,"name":"a","weight":0}]}`}},
	{`{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"t","$defs":{"port":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":65536}},
	  "type":"object","properties":{"port":{"$ref":"#/$defs/port"},"mode":{"enum":["a","b",null,true,3]},"tag":{"const":"x"},
	  "name":{"type":"string","pattern":"^[a-z]+$","minLength":2},"tags":{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer","multipleOf":5},"minItems":1,"maxItems":3}},
	  "patternProperties":{"^x-":{"type":"string"}},"additionalProperties":{"type":"boolean"},"minProperties":1,"maxProperties":5}`,
		[]string{`{"port":1}`, `{"port":65535,"mode":"a"}`, `{"mode":null}`, `{"mode":true}`, `{"mode":3}`, `{"tag":"x"}`,
			`{"name":"ab"}`, `{"tags":["a",5,10]}`, `{"x-y":"z"}`, `{"flag":false}`},
		[]string{`{"port":0}`, `{"port":65536}`, `{"port":"1"}`, `{"mode":"c"}`, `{"mode":false}`, `{"mode":3.0}`, `{"mode":4}`,
			`{"tag":"y"}`, `{"name":"a"}`, `{"name":"aB"}`, `{"tags":[]}`, `{"tags":[1]}`, `{"tags":["a",5,7]}`, `{"tags":["a",5,10,15]}`,
			`{"x-y":1}`, `{"flag":1}`, `{}`, `{"a":true,"b":true,"c":true,"d":true,"e":true,"f":true}`, `{"tag":"\u0078"}`}},
	{`{"anyOf":[{"type":"string"},{"type":"integer"}],"allOf":[{"not":{"const":5}}]}`,
		nil,
		[]string{`"a"`, `1`, `5`, `true`}},
	{`{"anyOf":[{"type":"string"},{"type":"integer","minimum":3}],"oneOf":[{"maxLength":3}]}`,
		[]string{`"abc"`, `4`},
		[]string{`"abcd"`, `2`, `2.5`, `null`}},
	{`{"$defs":{"tree":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/tree"}}},"additionalProperties":false}},"$ref":"#/$defs/tree"}`,
		[]string{`{"kids":[{"kids":[]},{}]}`},
		[]string{`{"kids":[{"kid":[]}]}`, `{"kids":[1]}`}},
	{`{"type":["number","null"],"minimum":0.1,"maximum":0.3}`,
		[]string{`0.2`, `null`, `0.25`},
		[]string{`0.1`, `0.3`, `0.30000000000000001`, `0.09`, `0.31`, `1e-1`}},
	{`true`, []string{`1`, `{"a":[]}`}, []string{`{"a":1,"a":2}`}},
	// A failed branch of an anyOf leaves no trace: "b" inside "a" is not
	// the top level's required "b".
	{`{"type":"object","required":["b"],"properties":{"a":{"anyOf":[{"properties":{"x":{"type":"string"}}},{"type":"object"}]}}}`,
		[]string{`{"a":{"x":"s"},"b":1}`, `{"a":{"x":2},"b":1}`}, []string{`{"a":{"b":1,"x":2}}`, `{"a":{"b":1,"x":"s"}}`}},
	{`{"minLength":3,"maxLength":4}`, []string{`"abc"`, `"ééé"`, `"éééé"`}, []string{`"éé"`, `"ab"`, `"ééééé"`, `"abcde"`}},
	{`{"uniqueItems":true}`, []string{`[1,2,"1",true,false,null,"a"]`, `[]`, `[-1,1]`},
		[]string{`[1,1]`, `[1,1.0]`, `[0,-0]`, `["a","\u0061"]`, `[true,true]`, `[[1],[1]]`, `[{"a":1},{"a":1}]`, `["a","a"]`, `[1e0,1]`, `[null,null]`}},
	{`{"minProperties":2}`, []string{`{"a":1,"b":1}`}, []string{`{"a":1,"a":1}`}},
	{`false`, nil, []string{`1`}},
	{`{"format":"email","type":"string"}`, []string{`"not an email"`}, nil},
}

func TestProvenDocumentsAreValid(t *testing.T) {
	for i, c := range cases {
		s := Compile([]byte(c.schema))
		if s == nil {
			t.Fatalf("case %d: the schema did not compile", i)
		}
		f := full(t, c.schema)
		for _, doc := range c.proven {
			if !s.Proves([]byte(doc)) {
				t.Errorf("case %d: %s not proven", i, doc)
			}
			if !fullValid(f, []byte(doc)) {
				t.Errorf("case %d: %s is not valid: a wrong test", i, doc)
			}
		}
		for _, doc := range c.others {
			if s.Proves([]byte(doc)) && !fullValid(f, []byte(doc)) {
				t.Errorf("case %d: %s proven, but the full validator refuses it", i, doc)
			}
		}
	}
}

// TestMutatedDocumentsAreNeverWronglyProven changes bytes of valid
// documents at random: whatever the fast path proves, the full validator
// accepts.
func TestMutatedDocumentsAreNeverWronglyProven(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte(`{}[]":,0123456789.-+eE truefalsn\u"x` + "\xc3\xa9\x00")
	proven := 0
	for i, c := range cases {
		s, f := Compile([]byte(c.schema)), full(t, c.schema)
		for _, doc := range append(append([]string{}, c.proven...), c.others...) {
			for range 300 {
				b := []byte(doc)
				for range 1 + rng.IntN(3) {
					if len(b) == 0 {
						break
					}
					switch j := rng.IntN(len(b)); rng.IntN(3) {
					case 0:
						b[j] = alphabet[rng.IntN(len(alphabet))]
					case 1:
						b = append(b[:j], b[j+1:]...)
					default:
						b = append(b[:j], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[j:]...)...)
					}
				}
				if s.Proves(b) {
					proven++
					if !fullValid(f, b) {
						t.Fatalf("case %d: %q proven, but the full validator refuses it", i, b)
					}
				}
			}
		}
	}
	if proven == 0 {
		t.Fatal("no mutated document was proven: the test checks nothing")
	}
	t.Logf("%d mutated documents proven, each valid", proven)
}

func TestSchemasNotHandledDoNotCompile(t *testing.T) {
	for _, schema := range []string{
		`{"$schema":"http://json-schema.org/draft-07/schema#"}`,
		`{"if":{"type":"string"},"then":{"minLength":1}}`,
		`{"contains":{"type":"string"}}`,
		`{"unevaluatedProperties":false}`,
		`{"propertyNames":{"maxLength":3}}`,
		`{"dependentRequired":{"a":["b"]}}`,
		`{"enum":[{"a":1}]}`,
		`{"$ref":"other.json"}`,
		`{"properties":{"a":{"$id":"x"}}}`,
		`{"x-vendor":1}`,
	} {
		if Compile([]byte(schema)) != nil {
			t.Errorf("%s compiled", schema)
		}
	}
}

func TestDeepDocumentsAreNotProven(t *testing.T) {
	s := Compile([]byte(`true`))
	doc := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	if s.Proves([]byte(doc)) {
		t.Fatal("proven past the depth limit")
	}
	doc = strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if !s.Proves([]byte(doc)) {
		t.Fatal("not proven at the depth limit")
	}
}

func BenchmarkProves(b *testing.B) {
	s := Compile([]byte(routing))
	var doc strings.Builder
	doc.WriteString(`{"items":[`)
	for i := 0; doc.Len() < 1000; i++ {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"id":%d,"name":"upstream-%d","weight":%d}`, i, i, i%100)
	}
	doc.WriteString(`]}`)
	in := []byte(doc.String())
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if !s.Proves(in) {
			b.Fatal("not proven")
		}
	}
}
