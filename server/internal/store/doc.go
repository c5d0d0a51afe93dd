// Package store defines Pawl's storage contract: a key space with store-wide
// revisions, a retained change log, and a commit feed for the watch hub.
//
// Every engine (the embedded bbolt engine in boltstore, and later Redis)
// implements Store and passes the conformance suite in storetest. The
// contract, in short:
//
//   - Every successful Put or Delete gets the next revision. Revisions start
//     at 1, strictly increase and are never reused; a failed mutation changes
//     nothing and does not advance the revision.
//   - A mutation is durable before its call returns.
//   - The change log holds every revision after the compact revision, without
//     holes. Reads at any revision from the compact revision to the current
//     one see the key space exactly as it was.
//   - Subscribers see every committed batch once, in revision order, before
//     the writers of that batch are answered.
package store
