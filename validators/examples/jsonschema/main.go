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

	"github.com/pawlcfg/pawl/validators/guest"
)

//go:embed schema.json
var embeddedSchema []byte

func init() { guest.Handle(validate) }

func main() {}

// compiled caches schemas by their bytes: an instance validates many
// configs against the same schema.
var compiled = map[string]*jsonschema.Schema{}

func schemaFor(params []byte) (*jsonschema.Schema, error) {
	raw := embeddedSchema
	if len(params) > 0 {
		var p struct {
			Schema json.RawMessage `json:"schema"`
		}
		if err := json.Unmarshal(params, &p); err != nil || len(p.Schema) == 0 {
			return nil, fmt.Errorf("params must be {\"schema\": {...}}: %v", err)
		}
		raw = p.Schema
	}
	if s, ok := compiled[string(raw)]; ok {
		return s, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("the schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("pawl:schema.json", doc); err != nil {
		return nil, err
	}
	s, err := c.Compile("pawl:schema.json")
	if err != nil {
		return nil, fmt.Errorf("the schema does not compile: %v", err)
	}
	compiled[string(raw)] = s
	return s, nil
}

func validate(in guest.Input) guest.Result {
	sch, err := schemaFor(in.Params)
	if err != nil {
		return fail("", err.Error())
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(in.Config))
	if err != nil {
		return fail("", "the config is not JSON: "+err.Error())
	}
	err = sch.Validate(doc)
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
