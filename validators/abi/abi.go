// Package abi holds what the host and guest sides of validator ABI v1
// (validators/ABI.md) share: the input framing and the result's JSON form.
// It has no dependencies, so both the host runtime and modules built for
// wasip1 can import it.
package abi

import (
	"encoding/binary"
	"errors"
)

// Version is the ABI version described here.
const Version = 1

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
	// Secrets locate the config's secret values, as JSON Pointers (RFC
	// 6901), e.g. /upstreams/0/token. Hosts redact those values from
	// violation messages and ACK reasons before they store or send them.
	Secrets []string `json:"secrets,omitempty"`
}

// Normalize applies the ABI's rule that any violation other than a warning
// makes the result invalid, and makes Violations non-nil.
func (r *Result) Normalize() {
	for _, v := range r.Violations {
		if v.Severity != SeverityWarning {
			r.Valid = false
		}
	}
	if r.Violations == nil {
		r.Violations = []Violation{}
	}
}

// ErrShortInput means the input framing is truncated.
var ErrShortInput = errors.New("abi: truncated input")

// EncodeInput frames in as four fields (config, media type, name, params),
// each a little-endian uint32 length and its bytes.
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

// DecodeInput is the inverse of EncodeInput. The fields alias b.
func DecodeInput(b []byte) (Input, error) {
	var fields [4][]byte
	for i := range fields {
		if len(b) < 4 {
			return Input{}, ErrShortInput
		}
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint32(len(b)) < n {
			return Input{}, ErrShortInput
		}
		fields[i], b = b[:n], b[n:]
	}
	in := Input{Config: fields[0], MediaType: string(fields[1]), Name: string(fields[2])}
	if len(fields[3]) > 0 {
		in.Params = fields[3]
	}
	return in, nil
}
