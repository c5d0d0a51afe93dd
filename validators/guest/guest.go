// Package guest is the library for validator authors who write in Go. A
// validator is a main package built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o v.wasm .
//
// that registers one function in init:
//
//	func init() { guest.Handle(validate) }
//	func main() {}
//
//	func validate(in guest.Input) guest.Result { ... }
//
// The library implements ABI v1 (validators/ABI.md): it exports
// pawl_abi_version, pawl_alloc and pawl_validate, decodes the input and
// encodes the Result.
package guest

import (
	"encoding/binary"
	"encoding/json"
	"errors"
)

// ABIVersion is the ABI this library implements.
const ABIVersion = 1

// Input is what a validator receives for one validation.
type Input struct {
	// Config is the config content to validate.
	Config []byte
	// MediaType is the content's media type, e.g. application/json.
	MediaType string
	// Name is the config's name or key.
	Name string
	// Params is the validator's optional parameters, as JSON (nil if none).
	Params []byte
}

// Severity says how serious a violation is.
type Severity string

const (
	// SeverityError makes the config invalid.
	SeverityError Severity = "error"
	// SeverityWarning is reported but does not make the config invalid.
	SeverityWarning Severity = "warning"
)

// Violation is one problem found in the config.
type Violation struct {
	// Path locates the problem, as a JSON Pointer (RFC 6901) where it
	// applies, e.g. /upstreams/2/weight.
	Path string `json:"path"`
	// Message says what is wrong.
	Message string `json:"message"`
	// Severity is error or warning.
	Severity Severity `json:"severity"`
}

// Result is a validator's verdict.
type Result struct {
	// Valid is false when the config must not be released.
	Valid bool `json:"valid"`
	// Violations are the problems found, errors and warnings.
	Violations []Violation `json:"violations"`
}

// Func validates one input.
type Func func(Input) Result

var handler Func

// Handle registers fn as the module's validator. Call it from init.
func Handle(fn Func) { handler = fn }

var errShortInput = errors.New("guest: truncated input")

// DecodeInput decodes ABI v1 input framing: four fields (config, media
// type, name, params), each a little-endian uint32 length and its bytes.
func DecodeInput(b []byte) (Input, error) {
	var fields [4][]byte
	for i := range fields {
		if len(b) < 4 {
			return Input{}, errShortInput
		}
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint32(len(b)) < n {
			return Input{}, errShortInput
		}
		fields[i], b = b[:n], b[n:]
	}
	in := Input{Config: fields[0], MediaType: string(fields[1]), Name: string(fields[2])}
	if len(fields[3]) > 0 {
		in.Params = fields[3]
	}
	return in, nil
}

// EncodeInput is the inverse of DecodeInput; the host uses the same framing.
func EncodeInput(in Input) []byte {
	fields := [][]byte{in.Config, []byte(in.MediaType), []byte(in.Name), in.Params}
	n := 0
	for _, f := range fields {
		n += 4 + len(f)
	}
	b := make([]byte, 0, n)
	for _, f := range fields {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// run decodes input, calls the handler and encodes its result. A Result
// with errors forces Valid to false.
func run(input []byte) []byte {
	in, err := DecodeInput(input)
	var res Result
	switch {
	case err != nil:
		res = Result{Violations: []Violation{{Path: "", Message: err.Error(), Severity: SeverityError}}}
	case handler == nil:
		res = Result{Violations: []Violation{{Message: "guest: no validator registered; call guest.Handle in init", Severity: SeverityError}}}
	default:
		res = handler(in)
	}
	for _, v := range res.Violations {
		if v.Severity != SeverityWarning {
			res.Valid = false
		}
	}
	if res.Violations == nil {
		res.Violations = []Violation{}
	}
	out, err := json.Marshal(res)
	if err != nil {
		out = []byte(`{"valid":false,"violations":[{"path":"","message":"guest: cannot encode result","severity":"error"}]}`)
	}
	return out
}
