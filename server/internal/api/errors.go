package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/pagetoken"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/validator"
	"github.com/pawlcfg/pawl/server/internal/watch"
	"github.com/pawlcfg/pawl/validators/host"
)

// Error returns err as a *connect.Error with the code Pawl assigns to it
// (README.md, "Errors") and a message that says what was wrong and what to
// do; it is the one place where codes are chosen: handlers return domain
// errors wrapped with %w and call Error once, so a wrapped error still maps
// to the right code. A *connect.Error passes through unchanged. A
// rejected release carries a ReleaseRejected detail, an unknown promotion a
// PromotionUnknown detail, a limit a LimitExceeded detail, a failed
// compare-and-swap a RevisionMismatch or PointerMoved detail
// (docs/ERRORS.md). Errors with no mapping become Internal, logged on
// log with the procedure name.
func Error(log *slog.Logger, spec connect.Spec, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	var rejected *release.RejectedError
	if errors.As(err, &rejected) {
		return rejectedError(rejected)
	}
	var unknown *rollout.UnknownError
	if errors.As(err, &unknown) {
		// Not the store's code: the caller must learn that the outcome is
		// unknown and how to resolve it.
		log.Warn("promotion outcome unknown", "procedure", spec.Procedure, "config", unknown.ConfigID, "key", unknown.IdempotencyKey, "error", unknown.Err)
		return withDetail(connect.NewError(connect.CodeUnknown, err),
			&pawlv1.PromotionUnknown{ConfigId: unknown.ConfigID, IdempotencyKey: unknown.IdempotencyKey})
	}
	// A validator's *host.TimeoutError matches context.DeadlineExceeded.
	if code, ok := contextCode(err); ok {
		return connect.NewError(code, err)
	}
	var (
		quota     *store.QuotaError
		notFound  *store.NotFoundError
		compacted *store.CompactedError
		future    *store.FutureRevisionError
		mismatch  *store.RevisionMismatchError
		badKey    *store.InvalidKeyError
		hostLimit *host.LimitError
		tooLarge  *validator.TooLargeError
		moved     *rollout.PointerError
		busy      *rollout.BusyError
	)
	switch {
	case errors.As(err, &quota):
		return quotaError(quota)
	case errors.As(err, &hostLimit):
		return hostLimitError(err, hostLimit)
	case errors.As(err, &tooLarge):
		return tooLargeModule(err, tooLarge)
	case errors.As(err, &moved):
		return pointerMovedError(err, moved)
	case errors.As(err, &notFound):
		return newError(connect.CodeNotFound, "key %q does not exist at revision %d", notFound.Key, notFound.Revision)
	case errors.As(err, &compacted):
		return newError(connect.CodeFailedPrecondition,
			"revision %d is compacted: the oldest readable revision is %d (current revision %d); read at a later revision",
			compacted.Requested, compacted.CompactRevision, compacted.Revision)
	case errors.As(err, &future):
		return newError(connect.CodeInvalidArgument,
			"revision %d is in the future: the current revision is %d", future.Requested, future.Revision)
	case errors.As(err, &mismatch):
		return mismatchError(mismatch)
	case errors.As(err, &badKey):
		return newError(connect.CodeInvalidArgument, "invalid %s: %s", badKey.Field, badKey.Reason)
	case errors.Is(err, host.ErrNotWasm), errors.Is(err, host.ErrABI), errors.Is(err, host.ErrTrap),
		errors.Is(err, host.ErrBadOutput), errors.Is(err, host.ErrDigestMismatch):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, validator.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, validator.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, rollout.ErrPointerMoved), errors.Is(err, rollout.ErrFenced):
		return connect.NewError(connect.CodeAborted, err)
	case errors.Is(err, rollout.ErrNotReady), errors.Is(err, rollout.ErrCannotRollBack):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, rollout.ErrNoPromotion), errors.Is(err, rollout.ErrNotMember):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, rollout.ErrKeyReused), errors.Is(err, rollout.ErrAlreadyRetired), errors.Is(err, rollout.ErrAlreadyRevoked):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, rollout.ErrContended), errors.Is(err, rollout.ErrEarlierNotRecorded):
		return connect.NewError(connect.CodeAborted, err)
	case errors.As(err, &busy):
		return LimitExceeded(AcksWaitingLimit, uint64(busy.Waiting), uint64(busy.Limit), "acks", "%v", busy)
	case errors.Is(err, release.ErrInvalid), errors.Is(err, instance.ErrInvalid), errors.Is(err, rollout.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, release.ErrNotFound), errors.Is(err, instance.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, release.ErrNoTargets):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, release.ErrContended):
		return connect.NewError(connect.CodeAborted, err)
	case errors.Is(err, instance.ErrStaleBoot):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, instance.ErrTakeover):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, store.ErrClosed), errors.Is(err, watch.ErrClosed), errors.Is(err, host.ErrClosed):
		return newError(connect.CodeUnavailable, "the server is shutting down; retry shortly or against another replica")
	case errors.Is(err, store.ErrRolledBack):
		// FailedPrecondition, not Unavailable: retrying does not help until
		// an operator accepts what the store holds.
		log.Error("the store went back in time; writes are refused", "procedure", spec.Procedure, "error", err)
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, store.ErrUnavailable):
		log.Warn("store unavailable", "procedure", spec.Procedure, "error", err)
		return newError(connect.CodeUnavailable, "the server cannot reach its store (%v); retry shortly or against another replica; "+
			"a write that failed this way may have committed: read before writing again", err)
	case errors.Is(err, store.ErrFenced):
		return newError(connect.CodeAborted, "%v; retry against the server that holds the lease", err)
	}
	log.Error("internal error", "procedure", spec.Procedure, "error", err)
	return newError(connect.CodeInternal, "internal error in %s; the server log has the details", spec.Procedure)
}

// quotaError says which limit a write hit, how full the store is, and
// what to do: free space (deletes, then compaction drops their history)
// or raise the quota. Its LimitExceeded detail says where the write would
// have taken the store (value) against the quota, or the quota and the
// reserve (limit_value).
func quotaError(e *store.QuotaError) error {
	const remedy = "delete keys you no longer need and let compaction drop their history (pawld --retain-revisions, --retain-for), or raise pawld --quota-bytes"
	low := store.Quota{Bytes: e.Quota}.LowWater()
	const flag, unit = "--quota-bytes", "bytes"
	switch {
	case e.Alarmed:
		return LimitExceeded(flag, uint64(e.Used), uint64(e.Quota), unit,
			"storage quota: the NOSPACE alarm is raised (the store holds %d bytes of its %d-byte quota, --quota-bytes); writes are refused until the store is under %d bytes (nine tenths of the quota): %s",
			e.Used, e.Quota, low, remedy)
	case e.Reserved:
		return LimitExceeded(flag, uint64(e.Used+e.Cost), uint64(e.Quota+e.Reserve), unit,
			"storage quota: this write of %d bytes would take the store from %d bytes past its %d-byte quota (--quota-bytes) and the %d-byte reserve for reports: %s",
			e.Cost, e.Used, e.Quota, e.Reserve, remedy)
	}
	return LimitExceeded(flag, uint64(e.Used+e.Cost), uint64(e.Quota), unit,
		"storage quota: this write of %d bytes would take the store from %d bytes past its %d-byte quota (--quota-bytes): %s",
		e.Cost, e.Used, e.Quota, remedy)
}

// rejectedError lists the violations in the message, for people, and in a
// ReleaseRejected detail, for programs.
func rejectedError(r *release.RejectedError) error {
	detail := &pawlv1.ReleaseRejected{ValidatorDigest: r.Digest, Violations: toProtoViolations(r.Violations)}
	lines := make([]string, 0, len(r.Violations))
	for _, v := range r.Violations {
		lines = append(lines, fmt.Sprintf("%s: %s", v.Path, v.Message))
	}
	return withDetail(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("validator %s rejected the content, so no release was created: %s",
		r.Digest, strings.Join(lines, "; "))), detail)
}

const (
	// DefaultPageSize is the page size of a listing that asks for none.
	DefaultPageSize = 100
	// MaxPageSize is the largest page; larger requests get this many.
	MaxPageSize = 1000
	// MaxPageBytes bounds a page of a key listing by its keys and values
	// too: a page ends once it holds this many bytes (it always holds at
	// least one key), so that listing a large tree costs the server a page
	// of memory at a time.
	MaxPageBytes = 4 << 20
)

// PageSize resolves a listing's requested page size: 0 means
// DefaultPageSize, more than MaxPageSize means MaxPageSize, and a negative
// size is an InvalidArgument error.
func PageSize(requested int32) (int, error) {
	switch {
	case requested < 0:
		return 0, InvalidArgument("page_size is %d; it must be 0 (default %d) or positive", requested, DefaultPageSize)
	case requested == 0:
		return DefaultPageSize, nil
	}
	return min(int(requested), MaxPageSize), nil
}

// PageStart reads a listing's page token ("": the first page): the store
// revision of the first page and the key to continue after. A token that
// is malformed or continues another listing than scope is an
// InvalidArgument error naming the field and the listing it must be of.
func PageStart(token, scope, field, listing string) (revision int64, after string, err error) {
	if token == "" {
		return 0, "", nil
	}
	tok, err := pagetoken.Decode(token)
	if err != nil || tok.Scope != scope {
		return 0, "", InvalidArgument("%s is not a token of %s; start again without it", field, listing)
	}
	return tok.Revision, tok.After, nil
}

// InvalidArgument is a shorthand for a CodeInvalidArgument error.
func InvalidArgument(format string, args ...any) error {
	return newError(connect.CodeInvalidArgument, format, args...)
}

func newError(code connect.Code, format string, args ...any) *connect.Error {
	return connect.NewError(code, fmt.Errorf(format, args...))
}

// contextCode maps context errors, wherever they are in the chain.
func contextCode(err error) (connect.Code, bool) {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled, true
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded, true
	}
	return 0, false
}
