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
	"encoding/json"

	"github.com/pawlcfg/pawl/validators/abi"
)

// ABIVersion is the ABI this library implements.
const ABIVersion = abi.Version

// Input is what a validator receives for one validation.
type Input = abi.Input

// Severity says how serious a violation is.
type Severity = abi.Severity

const (
	// SeverityError makes the config invalid.
	SeverityError = abi.SeverityError
	// SeverityWarning is reported but does not make the config invalid.
	SeverityWarning = abi.SeverityWarning
)

// Violation is one problem found in the config.
type Violation = abi.Violation

// Result is a validator's verdict. Any violation other than a warning makes
// it invalid, whatever Valid says.
type Result = abi.Result

// Func validates one input.
type Func func(Input) Result

var handler Func

// Handle registers fn as the module's validator. Call it from init.
func Handle(fn Func) { handler = fn }

// validOutput is the encoded result of most calls, encoded once.
var validOutput, _ = json.Marshal(Result{Valid: true, Violations: []Violation{}})

// run decodes input, calls the handler and encodes its result.
func run(input []byte) []byte {
	in, err := abi.DecodeInput(input)
	var res Result
	switch {
	case err != nil:
		res = Result{Violations: []Violation{{Message: err.Error(), Severity: SeverityError}}}
	case handler == nil:
		res = Result{Violations: []Violation{{Message: "guest: no validator registered; call guest.Handle in init", Severity: SeverityError}}}
	default:
		res = handler(in)
	}
	res.Normalize()
	if res.Valid && len(res.Violations) == 0 && len(res.Secrets) == 0 {
		return validOutput
	}
	out, err := json.Marshal(res)
	if err != nil {
		out = []byte(`{"valid":false,"violations":[{"path":"","message":"guest: cannot encode result","severity":"error"}]}`)
	}
	return out
}
