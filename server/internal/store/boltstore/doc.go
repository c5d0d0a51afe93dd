// Package boltstore is the embedded storage engine: one bbolt file under the
// data directory, for a single pawld node. It is what pawld uses when no
// other engine is configured.
//
// # Layout
//
// The file has four buckets:
//
//	meta  "rev" and "compact": the current and compact revisions
//	kv    key -> current record (create revision, mod revision, version, value)
//	log   big-endian revision -> event (type, key, value, revisions, time)
//	idx   key, NUL, big-endian revision -> nothing: every revision of each key
//
// Keys cannot contain NUL, so idx orders by key, then by revision, and the
// value of a key at revision R is the log entry of the last idx entry of that
// key at or below R.
//
// # Writes
//
// One goroutine owns all writes. It takes every request queued while the
// previous transaction was committing and applies them in one bbolt
// transaction: one fsync for the whole group (group commit), so concurrent
// writers do not pay one fsync each, and a lone writer pays no batching
// delay. A request that fails its compare-and-swap is answered with an error
// and takes no revision; the others in the group still commit. Subscribers
// get the committed events before any writer of the group is answered.
//
// # Compaction
//
// Compacting to revision C removes every log entry at or below C except the
// last put of each key that still exists (reads at revisions from C on need
// it), together with its idx entry. How much of the log to keep is decided
// above the engine (a retention policy calling Compact and RevisionAt);
// the writer compacts a bounded number of entries per transaction, so that
// writes queued behind a long compaction wait little.
package boltstore
