package store

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound means the key does not exist at the revision read.
	ErrNotFound = errors.New("store: key not found")
	// ErrCompacted means the revision asked for is no longer retained. A
	// watcher that receives it must take a snapshot and resubscribe.
	ErrCompacted = errors.New("store: revision compacted")
	// ErrFutureRevision means the revision asked for is after the current one.
	ErrFutureRevision = errors.New("store: future revision")
	// ErrRevisionMismatch means a compare-and-swap did not match.
	ErrRevisionMismatch = errors.New("store: revision mismatch")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrUnavailable means the engine's backend could not be reached (a
	// shared engine's server is down or partitioned away): the call may
	// be retried, against this server later or another one. A write that
	// fails with it may or may not have committed when the connection
	// broke after sending it: read before writing again.
	ErrUnavailable = errors.New("store: backend unavailable")
	// ErrFenced means a write carried a fence (WithFence) whose lease has
	// passed to another holder: work that must happen once was still
	// running on a server that lost its lease.
	ErrFenced = errors.New("store: fenced off: the lease passed to another holder")
)

// NotFoundError names the key that was not found. It matches ErrNotFound.
type NotFoundError struct {
	// Key is the key that does not exist.
	Key string
	// Revision is the revision the read was made at.
	Revision int64
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("store: key %q not found at revision %d", e.Key, e.Revision)
}

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// CompactedError says which revision was asked for and what is retained. It
// matches ErrCompacted.
type CompactedError struct {
	// Requested is the revision asked for.
	Requested int64
	// CompactRevision is the store's compact revision.
	CompactRevision int64
	// Revision is the store's current revision: a snapshot can be read there.
	Revision int64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("store: revision %d is compacted (compact revision %d, current revision %d)",
		e.Requested, e.CompactRevision, e.Revision)
}

// Is reports whether target is ErrCompacted.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// FutureRevisionError says a revision after the current one was asked for.
// It matches ErrFutureRevision.
type FutureRevisionError struct {
	// Requested is the revision asked for.
	Requested int64
	// Revision is the store's current revision.
	Revision int64
}

func (e *FutureRevisionError) Error() string {
	return fmt.Sprintf("store: revision %d is in the future (current revision %d)", e.Requested, e.Revision)
}

// Is reports whether target is ErrFutureRevision.
func (e *FutureRevisionError) Is(target error) bool { return target == ErrFutureRevision }

// RevisionMismatchError reports a failed compare-and-swap. It matches
// ErrRevisionMismatch.
type RevisionMismatchError struct {
	// Key is the key compared.
	Key string
	// Expected is the ModRevision the caller expected (0: absent).
	Expected int64
	// Actual is the key's ModRevision (0: absent).
	Actual int64
}

func (e *RevisionMismatchError) Error() string {
	if e.Actual == 0 {
		return fmt.Sprintf("store: key %q does not exist, expected mod revision %d", e.Key, e.Expected)
	}
	return fmt.Sprintf("store: key %q is at mod revision %d, expected %d", e.Key, e.Actual, e.Expected)
}

// Is reports whether target is ErrRevisionMismatch.
func (e *RevisionMismatchError) Is(target error) bool { return target == ErrRevisionMismatch }

// ChangedError reports a failed Unchanged condition: a key under the prefix
// changed after the revision the writer read at. It matches
// ErrRevisionMismatch.
type ChangedError struct {
	// Prefix and Since are the condition.
	Prefix string
	Since  int64
	// Key and Revision are the first change found; Key is empty when the
	// change log after Since was compacted (Revision is then the compact
	// revision), so that no answer could be given.
	Key      string
	Revision int64
}

func (e *ChangedError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("store: changes under %q after revision %d cannot be checked: the change log was compacted through revision %d",
			e.Prefix, e.Since, e.Revision)
	}
	return fmt.Sprintf("store: key %q under %q changed at revision %d, after revision %d", e.Key, e.Prefix, e.Revision, e.Since)
}

// Is reports whether target is ErrRevisionMismatch.
func (e *ChangedError) Is(target error) bool { return target == ErrRevisionMismatch }

// ErrRolledBack means a shared engine's backend went back in time: it
// holds fewer revisions than this server already handed out (it was
// restarted from an older snapshot, lost the tail of its append-only
// file, or failed over to a replica that lacked the last writes), or it
// is another data set altogether. Writes are refused until an operator
// accepts what the backend holds, so that no revision is given out twice.
var ErrRolledBack = errors.New("store: the backend went back in time")

// RolledBackError says how the backend went back in time. It matches
// ErrRolledBack.
type RolledBackError struct {
	// Head is the backend's revision when the fault was found.
	Head int64
	// Delivered is the highest revision a server handed out before.
	Delivered int64
	// Incarnation is the identity of the data set the server knew, and
	// Found the one the backend holds ("" when it holds none); they
	// differ when the data set was replaced.
	Incarnation, Found string
	// Remedy says what an operator does about it.
	Remedy string
}

func (e *RolledBackError) Error() string {
	msg := fmt.Sprintf("store: the backend went back in time: its head is revision %d, but revision %d was already handed out", e.Head, e.Delivered)
	if e.Found != e.Incarnation {
		found := e.Found
		if found == "" {
			found = "none"
		}
		msg = fmt.Sprintf("store: the backend holds another data set (incarnation %s, not %s; head revision %d, revision %d already handed out)",
			found, e.Incarnation, e.Head, e.Delivered)
	}
	if e.Remedy != "" {
		msg += "; " + e.Remedy
	}
	return msg
}

// Is reports whether target is ErrRolledBack.
func (e *RolledBackError) Is(target error) bool { return target == ErrRolledBack }
