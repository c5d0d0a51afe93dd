// Package fastschema proves JSON documents valid against a JSON Schema
// (draft 2020-12) in one pass over their bytes, without decoding them.
//
// It is a fast path in front of a full validator, not a validator: it
// answers only "proven valid" or "not proven". A schema that uses a
// keyword or form it does not handle does not compile (Compile returns
// nil), and a document it cannot decide exactly (a duplicate key, a
// number whose comparison with a bound needs more than a float64, a oneOf
// or not) is not proven. The full validator then decides, and gives the
// violations. So a document proven here is one the full validator accepts;
// the tests check that against github.com/santhosh-tekuri/jsonschema.
//
// It handles type, enum and const of scalars, the numeric bounds and
// multipleOf, minLength, maxLength and pattern, items and prefixItems,
// minItems, maxItems and uniqueItems (of scalars), properties,
// patternProperties, additionalProperties, required, minProperties and
// maxProperties, allOf, anyOf, a oneOf of one schema, and $ref to a JSON
// pointer in the same document; annotations (title, description, default,
// format, ...) are ignored as the full validator ignores them.
package fastschema
