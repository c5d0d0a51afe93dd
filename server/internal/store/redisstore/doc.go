// Package redisstore is the shared storage engine: the key space, its
// change log, blobs and records kept in Redis, so that several pawld
// replicas serve the same revisions and any of them can die.
//
// # Layout
//
// A store lives under a prefix; every key of it starts with the hash tag
// {prefix}:
//
//	rev                 the current revision
//	compact             the compact revision
//	kv                  hash: key -> current record (create, mod, version, value)
//	keys                sorted set of the current keys (listing in key order)
//	log                 hash: revision -> event (type, revisions, time, key, value)
//	idx                 sorted set of key, NUL, zero-padded revision: every
//	                    retained revision of each key (historic reads)
//	notices             the pub/sub channel of new revisions
//	incarnation         the data set's identity, "id:revision it began at"
//	rollback            hash: a fault found (Redis went back in time), until accepted
//	lease:NAME          hash: holder, expiry and token of a lease
//	blob:KIND:{meta,data,ids}         validator modules and other blobs
//	rec:KIND:{values,ids,expiry}      records (instance leases), with expiry
//
// # Writes
//
// Each Put, Delete and Txn is one Lua script, so one atomic step in Redis:
// it takes the next revisions, checks every compare (a transaction's
// pointer and receipt together), writes the records, the log and the
// index, and publishes the new revision on the notices channel. Because
// the revision is store-wide, every key shares one hash slot: on a Redis
// Cluster the whole store is one slot on one primary. Cluster (or
// Sentinel) buys availability, not write throughput.
//
// # Durability
//
// A mutation is acknowledged once Redis ran its script, so it is as
// durable as the Redis server's persistence (Durability says what it
// promises): with appendonly yes and appendfsync always, nothing
// acknowledged is lost when Redis crashes; with the default appendfsync
// everysec, a crash of the Redis host can lose about the last two seconds
// (WithWaitAOF closes it, on Redis 7.2 or later); without persistence, a
// restart of Redis loses everything. With replicas, a failover can lose
// what the primary had not yet replicated (Redis replication is
// asynchronous), unless every write waits for replicas (WithReplicaAcks:
// Redis WAIT in the write's pipeline, on the primary of the store's slot).
//
// # Going back in time
//
// When Redis loses acknowledged writes, the store notices: the data set
// has an incarnation, and each Store remembers the highest revision it
// handed out; every mutation and every read of the feed checks, in its
// script, that the head is not below it and the incarnation is the one
// known. Otherwise the fault is recorded in Redis, and until an operator
// accepts it (WithAcceptRollback) every mutation through any replica
// fails with a *store.RolledBackError and the feeds are stale. Accepting
// moves the revision counter and the compact revision one past the
// highest revision any replica reported, gives the data set a new
// incarnation, and puts MarkerKey: every feed skips the compacted
// stretch, and every watcher that resumes is told to take a snapshot.
//
// # Feed
//
// A Store follows Redis for its local subscribers with one goroutine: a
// pub/sub notice is a doorbell, the change log is the truth. On a notice
// newer than what it delivered, on a local write, and every head-check
// interval (WithHeadCheck), it reads the log from its last delivered
// revision and hands the new events on, a transaction whole; a lost
// notice or a dropped subscription costs at most one interval. Values are
// read from the log, never carried in the notices. While Redis cannot be
// read, the feed is stale: NotifyStale callbacks hear why, and again when
// it follows once more. If the log was compacted past what the feed
// delivered, the next batch starts after the gap.
//
// # Errors
//
// A call that cannot reach Redis fails with store.ErrUnavailable; a write
// that fails so may have committed (the connection broke after sending
// it).
package redisstore
