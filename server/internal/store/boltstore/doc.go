// Package boltstore is the embedded storage engine: a write-ahead log and
// one bbolt file under the data directory, for a single pawld node. It is
// what pawld uses when no other engine is configured.
//
// # Layout
//
// The bbolt file has four buckets:
//
//	meta  "rev" and "compact": the current and compact revisions;
//	      "incarnation": the store's ID, made at creation, new on Restore
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
// One goroutine, the writer, decides all writes. It takes every request
// queued while the previous group was being written, decides each in turn
// against the current state (compare-and-swaps, transactions' conditions),
// and appends the group's changes to the write-ahead log under wal/ as one
// record, synced with one fdatasync: concurrent writers share a sync, and
// a lone writer pays no batching delay. Subscribers get the changes, then
// the writers are answered: an answered write is in the log, on disk. A
// request that fails its compare-and-swap is answered with an error and
// takes no revision; the others in the group still commit.
//
// A second goroutine, the applier, writes the logged changes into bbolt
// behind the writer, as many groups per bbolt transaction as are waiting,
// each transaction synced as bbolt syncs. The writer decides against
// bbolt with the changes bbolt does not hold yet over it (kept in memory
// until bbolt has them). Every read first waits until bbolt holds every
// change logged when the read began, so a read sees every write answered
// before it. A log segment is deleted once bbolt holds all its changes.
//
// On Open, the changes the log holds and bbolt does not (a crash between
// the two) are written into bbolt before anything else. Each record has
// a checksum of its header (its length) and one of its payload, and is
// aligned so that its header lies in one disk sector. A record that a
// crash tore (a header of zeros in an unwritten sector, a sector of it
// never written, or running past the end of the file) ends the newest
// segment holding records: its writers were never answered, and its bytes
// are zeroed in place and synced, so that appends go on after the last
// whole record; empty segments after it are deleted. Damage a crash
// cannot explain (a record written whole that fails its checksums, a bad
// header, whole records after a bad one, a torn record before the newest
// segment) is refused with an error naming the segment, the offset and
// the revisions at stake. Every step of the recovery is safe to repeat
// after a crash in it. Segments of the previous format (*.wal) are read,
// never appended to. A failed write or sync of the log, or a failed bbolt
// transaction, stops the store: every later write and read gets the
// error, and a restart recovers from the log.
//
// The log's file operations go through walFS, which tests replace with a
// file system that loses what was not synced at a simulated power cut.
//
// # Snapshots
//
// Snapshot copies bbolt's file in one read transaction, once bbolt holds
// every change the log held when it was called: a consistent copy as of
// that transaction's revision, needing no log. Restore turns such a copy,
// checked against its sha256, into a data directory with a new
// incarnation.
//
// # Compaction
//
// Compacting to revision C removes every log entry at or below C except the
// last put of each key that still exists (reads at revisions from C on need
// it), together with its idx entry. How much of the log to keep is decided
// above the engine (a retention policy calling Compact and RevisionAt);
// the applier compacts a bounded number of entries per transaction, so that
// changes waiting behind a long compaction wait little.
package boltstore
