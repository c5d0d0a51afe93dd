// Command jsonschema is an example validator that checks a JSON config
// against a JSON Schema (draft 2020-12). The schema comes from the
// validator's parameters, {"schema": {...}}, or, without parameters, from
// schema.json embedded at build time.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o jsonschema.wasm .
package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pawlcfg/pawl/validators/examples/jsonschema/fastschema"
	"github.com/pawlcfg/pawl/validators/guest"
)

//go:embed schema.json
var embeddedSchema []byte

func init() { guest.Handle(validate) }

func main() {}

// schema is a schema compiled twice: by the full validator, and by
// fastschema where it handles the schema (fast is nil where not).
type schema struct {
	full *jsonschema.Schema
	fast *fastschema.Schema
}

// compiled caches schemas by the params that carried them: an instance
// validates many configs against the same schema. It holds as many
// entries as the instance saw distinct params, which is few.
var compiled = map[string]schema{}

func schemaFor(params []byte) (schema, error) {
	if s, ok := compiled[string(params)]; ok {
		return s, nil // the same params as before: nothing to decode
	}
	raw := embeddedSchema
	if len(params) > 0 {
		var p struct {
			Schema json.RawMessage `json:"schema"`
		}
		if err := json.Unmarshal(params, &p); err != nil || len(p.Schema) == 0 {
			return schema{}, fmt.Errorf("params must be {\"schema\": {...}}: %v", err)
		}
		raw = p.Schema
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return schema{}, fmt.Errorf("the schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("pawl:schema.json", doc); err != nil {
		return schema{}, err
	}
	full, err := c.Compile("pawl:schema.json")
	if err != nil {
		return schema{}, fmt.Errorf("the schema does not compile: %v", err)
	}
	s := schema{full: full, fast: fastschema.Compile(raw)}
	compiled[string(params)] = s
	return s, nil
}

func validate(in guest.Input) guest.Result {
	sch, err := schemaFor(in.Params)
	if err != nil {
		return fail("", err.Error())
	}
	// The fast path proves most valid configs valid in one pass over
	// their bytes; the full validator decides the rest and says why.
	if sch.fast != nil && sch.fast.Proves(in.Config) {
		return guest.Result{Valid: true}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(in.Config))
	if err != nil {
		return fail("", "the config is not JSON: "+err.Error())
	}
	err = sch.full.Validate(doc)
	if err == nil {
		return guest.Result{Valid: true}
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fail("", err.Error())
	}
	var res guest.Result
	for _, unit := range ve.BasicOutput().Errors {
		if unit.Error == nil {
			continue
		}
		res.Violations = append(res.Violations, guest.Violation{
			Path:     unit.InstanceLocation,
			Message:  unit.Error.String(),
			Severity: guest.SeverityError,
		})
	}
	if len(res.Violations) == 0 {
		return fail("", ve.Error())
	}
	return res
}

func fail(path, msg string) guest.Result {
	return guest.Result{Violations: []guest.Violation{{Path: path, Message: msg, Severity: guest.SeverityError}}}
}
