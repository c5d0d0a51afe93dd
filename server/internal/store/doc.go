// Package store defines Pawl's storage contract: a key space with store-wide
// revisions, a retained change log, and a commit feed for the watch hub.
//
// Every engine (the embedded bbolt engine in boltstore, and the Redis
// engine in redisstore, which several servers share) implements Store and
// passes the conformance suite in storetest; an engine that several
// servers share also passes its shared part (two handles on one backend).
// The contract, in short:
//
//   - Every successful Put or Delete gets the next revision. Revisions start
//     at 1, strictly increase and are never reused; a failed mutation changes
//     nothing and does not advance the revision.
//   - A mutation is durable, as far as the engine's durability goes, before
//     its call returns: boltstore syncs its write-ahead log before it
//     answers (one fdatasync per group of writes); redisstore is as
//     durable as the Redis server's persistence (appendonly yes with
//     appendfsync always loses nothing acknowledged; the default everysec
//     can lose the last second on a crash of the Redis host).
//   - The change log holds every revision after the compact revision, without
//     holes. Reads at any revision from the compact revision to the current
//     one see the key space exactly as it was.
//   - Subscribers see every committed revision once, in order; a write
//     through a handle is seen by that handle's subscribers before the
//     write returns. Writes through other handles of a shared engine are
//     seen soon after, read from the change log (a gap is possible only
//     where the log was compacted before it could be read).
//   - An engine whose backend cannot be reached fails with ErrUnavailable.
//   - How much of the change log is kept is decided above the engine: a
//     retention policy calls Compact (by count) and RevisionAt (by age).
//   - Records (PutRecords) and blobs stay outside revisions and the log.
//     Engines shared by several servers implement Leaser, for work that
//     must run on one server at a time, and honour WithFence.
package store
