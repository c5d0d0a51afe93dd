// Package pawlerr reads the details of the errors a Pawl server returns:
// what a program must act on besides the code and the message, decoded
// the same from every protocol (Connect, gRPC, gRPC-Web). docs/ERRORS.md
// lists every code and detail.
//
//	_, err := kv.Put(ctx, req)
//	if m, ok := pawlerr.RevisionMismatchFrom(err); ok {
//		// read the key at m.GetCurrentModRevision() and try again
//	}
//	if l, ok := pawlerr.LimitFrom(err); ok {
//		log.Printf("over %s: %d of %d %s", l.GetLimit(), l.GetValue(), l.GetLimitValue(), l.GetUnit())
//	}
//
// Each function looks through wrapped errors (errors.As) for a
// *connect.Error and returns its first detail of the type asked for; ok
// is false when there is none.
package pawlerr

import (
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// Detail returns the first detail of type T of the *connect.Error in
// err's chain: the generic form of the functions below, for a detail they
// do not name.
func Detail[T proto.Message](err error) (T, bool) {
	var zero T
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return zero, false
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if t, ok := v.(T); ok {
			return t, true
		}
	}
	return zero, false
}

// LimitFrom returns the limit a RESOURCE_EXHAUSTED refusal hit: the flag
// that sets it, its value, and how far the request went.
func LimitFrom(err error) (*pawlv1.LimitExceeded, bool) {
	return Detail[*pawlv1.LimitExceeded](err)
}

// RejectedFrom returns the violations of content its validator rejected
// (an INVALID_ARGUMENT CreateRelease), with the validator's digest.
func RejectedFrom(err error) (*pawlv1.ReleaseRejected, bool) {
	return Detail[*pawlv1.ReleaseRejected](err)
}

// RevisionMismatchFrom returns the key of a failed compare-and-swap (a
// FAILED_PRECONDITION Put, Delete or Txn) and its mod revision now.
func RevisionMismatchFrom(err error) (*pawlv1.RevisionMismatch, bool) {
	return Detail[*pawlv1.RevisionMismatch](err)
}

// PointerMovedFrom returns the active pointer as it is after an ABORTED
// Promote or Rollback that expected it elsewhere.
func PointerMovedFrom(err error) (*pawlv1.PointerMoved, bool) {
	return Detail[*pawlv1.PointerMoved](err)
}

// PromotionUnknownFrom returns the config and idempotency key of a
// Promote or Rollback whose outcome the server could not tell (UNKNOWN):
// GetPromotion with them says whether it happened.
func PromotionUnknownFrom(err error) (*pawlv1.PromotionUnknown, bool) {
	return Detail[*pawlv1.PromotionUnknown](err)
}
