package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/validators/host/internal/wasmcheck"
)

var (
	// ErrDigestMismatch means the module bytes do not hash to the digest
	// they were loaded under.
	ErrDigestMismatch = errors.New("validator: digest mismatch")
	// ErrNotWasm means the bytes are not a valid WebAssembly module.
	ErrNotWasm = errors.New("validator: not a WebAssembly module")
	// ErrABI means the module's imports or exports fall outside ABI v1.
	ErrABI = errors.New("validator: module does not follow ABI v1")
	// ErrTimeout means a call ran past its deadline. It also matches
	// context.DeadlineExceeded.
	ErrTimeout = errors.New("validator: deadline exceeded")
	// ErrMemoryLimit means the module tried to grow past the memory limit.
	ErrMemoryLimit = errors.New("validator: memory limit exceeded")
	// ErrOutputTooLarge means the module's result is over the output limit.
	ErrOutputTooLarge = errors.New("validator: output too large")
	// ErrTrap means the module trapped or exited during a call.
	ErrTrap = errors.New("validator: module trapped")
	// ErrBadOutput means the module returned bytes that are not a result.
	ErrBadOutput = errors.New("validator: malformed result")
	// ErrClosed means the runtime was closed.
	ErrClosed = errors.New("validator: runtime closed")
	// ErrLimit means a module or a call is over one of the runtime's
	// limits: the module's shape (ModuleLimits), its compile time, the
	// compilations running at once, or the memory budget. The error is a
	// *LimitError.
	ErrLimit = errors.New("validator: over a limit")
)

// Limit names a limit, as LimitError reports it.
type Limit = wasmcheck.Limit

// The limits of ModuleLimits, and those of the runtime.
const (
	LimitFunctions      = wasmcheck.LimitFunctions
	LimitFunctionLocals = wasmcheck.LimitFunctionLocals
	LimitLocals         = wasmcheck.LimitLocals
	LimitFunctionBytes  = wasmcheck.LimitFunctionBytes
	LimitCodeBytes      = wasmcheck.LimitCodeBytes
	LimitLoopDepth      = wasmcheck.LimitLoopDepth
	LimitLoopJoins      = wasmcheck.LimitLoopJoins
	LimitBlocks         = wasmcheck.LimitBlocks
	LimitBlockJoins     = wasmcheck.LimitBlockJoins
	// LimitCompileTime is WithCompileTimeout.
	LimitCompileTime Limit = "compile time"
	// LimitCompiles is WithMaxCompiles.
	LimitCompiles Limit = "concurrent compilations"
	// LimitMemoryBudget is WithMemoryBudget.
	LimitMemoryBudget Limit = "memory budget"
	// LimitMemory is WithMemoryLimit: its error also matches
	// ErrMemoryLimit.
	LimitMemory Limit = "memory"
	// LimitOutput is WithMaxOutput: its error also matches
	// ErrOutputTooLarge.
	LimitOutput Limit = "output bytes"
)

// units are the units of the limits' values, as LimitError.Unit says.
var units = map[Limit]string{
	LimitFunctions: "functions", LimitFunctionLocals: "locals", LimitLocals: "locals",
	LimitFunctionBytes: "bytes", LimitCodeBytes: "bytes", LimitLoopDepth: "loops", LimitLoopJoins: "loop joins",
	LimitCompileTime: "milliseconds", LimitCompiles: "compilations", LimitMemoryBudget: "instances",
	LimitMemory: "bytes", LimitOutput: "bytes",
}

// LimitError says which limit was hit, and by how much. It matches
// ErrLimit, and the memory and output limits' errors also ErrMemoryLimit
// and ErrOutputTooLarge.
type LimitError struct {
	// Limit is the limit that was hit.
	Limit Limit
	// Msg says what was over it.
	Msg string
	// Max is the limit's value, in Unit.
	Max uint64
	// Got is what the module or the call had or needed, in Unit; 0 when
	// it is not known (the runtime stopped it at the limit).
	Got uint64
}

func (e *LimitError) Error() string { return "validator: " + e.Msg }

// Unit is the unit of Max and Got: "bytes", "functions", "locals",
// "loops", "loop joins", "milliseconds", "compilations" or "instances".
func (e *LimitError) Unit() string { return units[e.Limit] }

// Is reports whether target is ErrLimit, or the sentinel of the memory or
// output limit.
func (e *LimitError) Is(target error) bool {
	switch target {
	case ErrLimit:
		return true
	case ErrMemoryLimit:
		return e.Limit == LimitMemory
	case ErrOutputTooLarge:
		return e.Limit == LimitOutput
	}
	return false
}

// ABIError lists every way a module departs from ABI v1. It matches ErrABI.
type ABIError struct {
	// Problems are the offending imports and missing or mistyped exports,
	// or the version mismatch: every problem below, in that order.
	Problems []string
	// Imports are the problems with the module's imports.
	Imports []string
	// Exports are the problems with its exports: missing, or of another
	// signature.
	Exports []string
	// Version says what pawl_abi_version returned when it is not the
	// host's ABI version; empty otherwise.
	Version string
}

func (e *ABIError) Error() string {
	return "validator: module does not follow ABI v1: " + strings.Join(e.Problems, "; ")
}

// Is reports whether target is ErrABI.
func (e *ABIError) Is(target error) bool { return target == ErrABI }

// TimeoutError says a call ran past its limit. It matches ErrTimeout and
// context.DeadlineExceeded.
type TimeoutError struct {
	// Limit is the per-call deadline that was exceeded.
	Limit time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("validator: ran longer than the %s limit and was stopped", e.Limit)
}

// Is reports whether target is ErrTimeout or context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// TrapError says the module trapped or exited; Detail holds what it wrote
// to stderr (truncated), which for a Go module is the panic message.
type TrapError struct {
	// Cause is wazero's error.
	Cause error
	// Detail is the module's stderr, truncated.
	Detail string
}

func (e *TrapError) Error() string {
	msg := "validator: module trapped: " + e.Cause.Error()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is reports whether target is ErrTrap.
func (e *TrapError) Is(target error) bool { return target == ErrTrap }

// Unwrap returns the cause.
func (e *TrapError) Unwrap() error { return e.Cause }
