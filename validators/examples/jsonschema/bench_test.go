package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pawlcfg/pawl/validators/guest"
)

// benchSchema is the params of BenchmarkNative: a schema.
var benchSchema = []byte(`{"schema":{"type":"object","required":["items"],"properties":{"items":{"type":"array","items":{
  "type":"object","required":["id","name","weight"],"additionalProperties":false,
  "properties":{"id":{"type":"integer","minimum":0},"name":{"type":"string","maxLength":64},"weight":{"type":"number","minimum":0,"maximum":100}}}}}}}`)

// document returns a valid config of about size bytes.
func document(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < size-40; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"upstream-%d","weight":%d}`, i, i, i%100)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkNative runs the validator built for this machine rather than
// for wasm, on the document and schema of validators/host's
// BenchmarkJSONSchema: the two side by side say what the wasm build costs.
func BenchmarkNative(b *testing.B) {
	in := guest.Input{Config: document(1 << 10), Params: benchSchema}
	b.ReportAllocs()
	for b.Loop() {
		if r := validate(in); !r.Valid {
			b.Fatal(r)
		}
	}
}

// BenchmarkNativeFullValidator is BenchmarkNative without the fast path:
// what every document cost before it, and what an invalid one costs now.
func BenchmarkNativeFullValidator(b *testing.B) {
	sch, err := schemaFor(benchSchema)
	if err != nil {
		b.Fatal(err)
	}
	doc := document(1 << 10)
	b.ReportAllocs()
	for b.Loop() {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		if err != nil || sch.full.Validate(v) != nil {
			b.Fatal(err)
		}
	}
}
