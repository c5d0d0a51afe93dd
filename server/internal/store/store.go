package store

import (
	"context"
	"time"
)

// KeyValue is one key with its value and revisions.
type KeyValue struct {
	// Key is a UTF-8 path starting with "/".
	Key string
	// Value is the stored bytes; nil in a delete event.
	Value []byte
	// CreateRevision is the revision that created the key (since its last
	// deletion).
	CreateRevision int64
	// ModRevision is the revision of the key's last change.
	ModRevision int64
	// Version counts the puts since the key was created; 0 after a delete.
	Version int64
}

// EventType says what kind of change an Event is.
type EventType uint8

const (
	// EventPut is a create or an overwrite.
	EventPut EventType = 1
	// EventDelete is a deletion.
	EventDelete EventType = 2
)

// String returns "PUT" or "DELETE".
func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	default:
		return "UNKNOWN"
	}
}

// Event is one committed change: exactly one per revision.
type Event struct {
	// Type is put or delete.
	Type EventType
	// KV is the key after the change; for a delete, Value is nil and
	// ModRevision is the deletion's revision.
	KV KeyValue
	// PrevRevision is the key's ModRevision before the change, 0 if it did
	// not exist.
	PrevRevision int64
	// Time is when the change was committed.
	Time time.Time
	// More says that the next revision belongs to the same transaction:
	// a reader that must not split a transaction (a watch stream, which
	// delivers one as one message) reads on to the event without it.
	More bool
}

// Revision is the revision of the change.
func (e Event) Revision() int64 { return e.KV.ModRevision }

// Status reports a store's revisions.
type Status struct {
	// Revision is the revision of the last committed change (0 when empty).
	Revision int64
	// CompactRevision is the highest revision no longer in the change log.
	// Reads at revisions from CompactRevision on, and change-log reads from
	// CompactRevision+1 on, succeed.
	CompactRevision int64
	// Incarnation names this store's history: made when the store is
	// created, made anew when it is restored from a backup, so that a
	// watcher resuming with a revision of another history learns that
	// its revisions mean nothing here. Empty when the engine has none
	// (unknown: never compared).
	Incarnation string
}

// Put asks for one write.
type Put struct {
	// Key to write; the caller validates it with ValidateKey.
	Key string
	// Value to write.
	Value []byte
	// ExpectModRevision, when set, makes the put conditional: the key's
	// current ModRevision must equal it (0: the key must not exist).
	ExpectModRevision *int64
}

// Delete asks for one deletion.
type Delete struct {
	// Key to delete.
	Key string
	// ExpectModRevision, when set, makes the delete conditional.
	ExpectModRevision *int64
}

// Compare is a condition of a transaction: the key's ModRevision must equal
// ModRevision (0: the key must not exist).
type Compare struct {
	// Key is the key compared.
	Key string
	// ModRevision is the expected ModRevision; 0 means absent.
	ModRevision int64
}

// Unchanged is a condition of a transaction over a whole prefix: no key
// under Prefix was put or deleted after revision Since. A writer that read
// many keys at one revision (including keys that did not exist then) commits
// with it only if nothing it read, and nothing it would have read, changed.
// When the change log after Since was compacted the store cannot tell, and
// the condition fails.
type Unchanged struct {
	// Prefix is the key prefix watched ("" for every key).
	Prefix string
	// Since is the revision the writer read at.
	Since int64
}

// Txn asks for several puts and deletes that commit together, or not at
// all, when every compare holds.
type Txn struct {
	// Compares must all hold at commit.
	Compares []Compare
	// Unchanged must all hold at commit.
	Unchanged []Unchanged
	// Puts are applied in order; their ExpectModRevision is ignored (use
	// Compares). Each gets the next revision: the changes of one
	// transaction have consecutive revisions and are delivered to
	// watchers together.
	Puts []Put
	// Deletes are the keys deleted after the puts, in order, each at the
	// next revision; a key that does not exist is skipped (it takes no
	// revision). No key may appear twice among Puts and Deletes.
	Deletes []string
}

// Result reports a successful mutation.
type Result struct {
	// Revision is the revision the mutation was committed at.
	Revision int64
	// Prev is the key before the mutation; nil if it did not exist.
	Prev *KeyValue
}

// Page is one page of a listing.
type Page struct {
	// KVs are the keys of the page, in key order.
	KVs []KeyValue
	// Revision is the revision the page was read at.
	Revision int64
	// More says whether keys after the last one of the page exist.
	More bool
}

// Changes is a stretch of the change log.
type Changes struct {
	// Events are the matching changes, in revision order.
	Events []Event
	// Through is the last revision examined: the next read starts at
	// Through+1. It is at least the revision asked for minus one.
	Through int64
}

// Blob is an immutable object stored beside the key space, outside its
// revisions and watches: validator modules, for one.
type Blob struct {
	// ID names the object within its kind; for content-addressed objects,
	// the digest.
	ID string
	// Meta is the caller's metadata, stored with the object.
	Meta []byte
	// Data is the object; empty in listings.
	Data []byte
}

// Record is a mutable entry kept beside the key space, outside its
// revisions, watches and change log: what changes too often to be history,
// such as instance leases.
type Record struct {
	// ID names the record within its kind.
	ID string
	// Value is the record.
	Value []byte
	// ExpiresAt, when set, lets the engine drop the record after it: a
	// shared engine does (ListRecords stops returning it), an embedded one
	// may keep it. Readers judge freshness from the value either way.
	ExpiresAt time.Time
}

// CommitFunc receives each committed batch of events, in revision order,
// consecutive with the batch before it, except across a stretch of the log
// that was compacted before the feed could read it (a shared engine whose
// server was unreachable): the next batch then starts after the gap, and
// the receiver must treat what it lost as unknown. It is called from one
// goroutine of the store and must not block.
type CommitFunc func(events []Event)

// CommitObserver hears, from an engine given one, how long each put,
// delete or transaction took to commit (or to fail: err is its error),
// from the call to the answer. It is called from the writing goroutine
// and must not block.
type CommitObserver func(d time.Duration, err error)

// Store is a key space with revisions and a change log.
//
// All methods are safe for concurrent use. After Close, every method returns
// ErrClosed.
type Store interface {
	// Put writes one key. It fails with a *RevisionMismatchError when the
	// expected revision does not match.
	Put(ctx context.Context, p Put) (Result, error)
	// Delete removes one key. It fails with ErrNotFound when the key does not
	// exist and with a *RevisionMismatchError on a mismatch.
	Delete(ctx context.Context, d Delete) (Result, error)
	// Txn commits t's puts atomically if every compare and every unchanged
	// condition holds; otherwise it fails with the first
	// *RevisionMismatchError or *ChangedError (both match
	// ErrRevisionMismatch) and writes nothing. The Result's Revision is the
	// last change's (the current revision when every delete was skipped and
	// there was no put); Prev is nil.
	Txn(ctx context.Context, t Txn) (Result, error)
	// Get reads one key at a revision (0: current). It fails with ErrNotFound,
	// *CompactedError or *FutureRevisionError.
	Get(ctx context.Context, key string, revision int64) (KeyValue, int64, error)
	// List reads up to limit keys with the prefix, after the key after (""
	// for the first page), at a revision (0: current).
	List(ctx context.Context, prefix string, revision int64, after string, limit int) (Page, error)
	// Changes reads the change log from revision from (inclusive), examining
	// at most limit revisions (more, to finish a transaction: it never stops
	// inside one), and returns those under prefix. It fails with
	// *CompactedError when from is at or below the compact revision.
	Changes(ctx context.Context, from int64, prefix string, limit int) (Changes, error)
	// Compact drops change-log entries at or below revision. Compacting to a
	// revision at or below the current compact revision does nothing.
	Compact(ctx context.Context, revision int64) error
	// RevisionAt returns the last revision committed at or before t that
	// the change log still holds, or the compact revision when none is
	// that old: what a retention policy by age compacts to.
	RevisionAt(ctx context.Context, t time.Time) (int64, error)
	// Status returns the current and compact revisions.
	Status(ctx context.Context) (Status, error)
	// PutBlob stores an object of a kind under id, durably, unless one with
	// that id exists: objects are immutable. It reports whether it stored
	// this one.
	PutBlob(ctx context.Context, kind string, b Blob) (created bool, err error)
	// GetBlob returns an object, with its data only when withData is set.
	// It fails with ErrNotFound (a *NotFoundError naming the id).
	GetBlob(ctx context.Context, kind, id string, withData bool) (Blob, error)
	// ListBlobs returns up to limit objects (without data) in id order,
	// after the id after, and whether more follow.
	ListBlobs(ctx context.Context, kind, after string, limit int) ([]Blob, bool, error)
	// PutRecords stores records of a kind, each replacing the record with
	// its ID, all together and durably; they take no revision. Engines may
	// expire them (a lease store does), so readers judge freshness from
	// the value.
	PutRecords(ctx context.Context, kind string, recs []Record) error
	// ListRecords returns up to limit records of a kind in ID order, after
	// the ID after ("" for the first), and whether more follow.
	ListRecords(ctx context.Context, kind, after string, limit int) ([]Record, bool, error)
	// Subscribe registers fn for every batch committed from now on and
	// returns a function that unregisters it. Every committed revision
	// reaches fn once, in order; a write made through this handle reaches
	// it before the write returns, and writes made through other handles
	// of a shared engine (other servers) soon after.
	Subscribe(fn CommitFunc) (unsubscribe func())
	// Close stops the store's goroutines and releases its files. Calls in
	// flight finish or fail with ErrClosed. Close is idempotent.
	Close() error
}

// Leaser is implemented by engines that several servers share: a named
// lease that one holder has at a time, for work that must happen once
// (deadline supervision, compaction). An embedded engine, with one server,
// has no need of it.
type Leaser interface {
	// AcquireLease takes the named lease for holder for ttl, or renews it
	// if holder has it. It reports whether holder has it now, and its
	// token, which grows every time the lease changes hands: a write that
	// carries it (WithFence) fails with ErrFenced once another holder took
	// the lease.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (token int64, held bool, err error)
	// ReleaseLease gives the lease up, if holder has it.
	ReleaseLease(ctx context.Context, name, holder string) error
}

// StaleNotifier is implemented by engines whose feed can fall behind the
// store (a shared engine whose server is unreachable): fn learns the
// reason when the feed stops following the store, and nil when it follows
// again. Until then, subscribers get nothing new, and watchers must be
// told that what they have may be stale.
type StaleNotifier interface {
	// NotifyStale registers fn and returns its unregistration. fn is
	// called from the feed's goroutine and must not block.
	NotifyStale(fn func(err error)) (stop func())
}

// Snapshotter is implemented by engines that can copy themselves whole
// while they serve: the embedded engine.
type Snapshotter interface {
	// Snapshot writes a consistent copy of the whole store, as of one
	// revision, to a file it returns open for reading; the caller closes
	// it, which removes the file.
	Snapshot(ctx context.Context) (*Snapshot, error)
}

// Snapshot is a consistent copy of a store, as a file to read.
type Snapshot struct {
	// File is the copy, open for reading at its start. Close removes it.
	File SnapshotFile
	// Status is the copy's revisions and incarnation.
	Status Status
	// Size is the copy's length in bytes.
	Size int64
	// SHA256 is the sha256 of the copy's bytes.
	SHA256 [32]byte
}

// SnapshotFile is the file of a Snapshot.
type SnapshotFile interface {
	Read(p []byte) (int, error)
	// Close closes and removes the file.
	Close() error
}

// Fence is a lease and the token its holder got: writes made under it
// commit only while the lease is still the holder's.
type Fence struct {
	// Lease is the lease's name.
	Lease string
	// Token is the token AcquireLease returned.
	Token int64
}

type fenceKey struct{}

// WithFence returns ctx with a fence: an engine that supports leases
// commits the writes made with ctx only while the fence's lease has its
// token (engines without leases ignore it).
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom returns the fence of ctx, if it has one.
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}
