package api

import (
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/validator"
	"github.com/pawlcfg/pawl/validators/host"
)

// withDetail adds msg to ce as an error detail, which every protocol
// carries (Connect, gRPC, gRPC-Web; docs/ERRORS.md). A detail that cannot
// be encoded is left off: the code and the message still say what
// happened.
func withDetail(ce *connect.Error, msg proto.Message) *connect.Error {
	if d, err := connect.NewErrorDetail(msg); err == nil {
		ce.AddDetail(d)
	}
	return ce
}

// LimitExceeded is a ResourceExhausted error whose message is format and
// args, with a LimitExceeded detail: the limit by its flag, what the
// request had (value) and the limit's value (max), in unit.
func LimitExceeded(limit string, value, max uint64, unit string, format string, args ...any) *connect.Error {
	return withDetail(newError(connect.CodeResourceExhausted, format, args...),
		&pawlv1.LimitExceeded{Limit: limit, Value: value, LimitValue: max, Unit: unit})
}

// AcksWaitingLimit names, in LimitExceeded, the bound on the ACKs waiting
// to be recorded (rollout.DefaultAcksWaiting), which no flag sets.
const AcksWaitingLimit = "acks waiting"

// sizeLimit is LimitExceeded for a number of bytes over a flag's limit,
// with the message every such refusal has: "WHAT is N bytes; the limit is
// M bytes (pawld FLAG)".
func sizeLimit(flag, what string, size, max int) *connect.Error {
	return LimitExceeded(flag, uint64(size), uint64(max), "bytes",
		"%s is %d bytes; the limit is %d bytes (pawld %s)", what, size, max, flag)
}

// hostLimitError is a validator runtime's refusal, with its limit.
func hostLimitError(err error, l *host.LimitError) *connect.Error {
	ce := connect.NewError(connect.CodeResourceExhausted, err)
	return withDetail(ce, &pawlv1.LimitExceeded{Limit: validator.LimitName(l.Limit), Value: l.Got, LimitValue: l.Max, Unit: l.Unit()})
}

// tooLargeModule is a module over --max-validator-bytes.
func tooLargeModule(err error, e *validator.TooLargeError) *connect.Error {
	ce := connect.NewError(connect.CodeResourceExhausted, err)
	return withDetail(ce, &pawlv1.LimitExceeded{Limit: "--max-validator-bytes", Value: uint64(e.Size), LimitValue: uint64(e.Max), Unit: "bytes"})
}

// mismatchError is a failed compare-and-swap of a key, with the key's
// revision now.
func mismatchError(e *store.RevisionMismatchError) *connect.Error {
	var ce *connect.Error
	if e.Actual == 0 {
		ce = newError(connect.CodeFailedPrecondition,
			"compare-and-swap failed: key %q does not exist (expected mod revision %d)", e.Key, e.Expected)
	} else {
		ce = newError(connect.CodeFailedPrecondition,
			"compare-and-swap failed: key %q is at mod revision %d, not %d; read it again and retry", e.Key, e.Actual, e.Expected)
	}
	return withDetail(ce, &pawlv1.RevisionMismatch{Key: e.Key, ExpectedModRevision: e.Expected, CurrentModRevision: e.Actual})
}

// pointerMovedError is a Promote or Rollback that expected the pointer
// elsewhere, with the pointer now.
func pointerMovedError(err error, e *rollout.PointerError) *connect.Error {
	return withDetail(connect.NewError(connect.CodeAborted, err), &pawlv1.PointerMoved{ConfigId: e.ConfigID,
		ExpectedGeneration: e.ExpectedGeneration, ExpectedEpoch: e.ExpectedEpoch, Current: toProtoPointer(e.Pointer)})
}
