// Package audit keeps Pawl's audit log: an append-only record of every
// mutation and every refused request, each record chained to the one
// before it by sha256 (the form and the check are package
// sdk/auditchain's), kept apart from the store so that compaction never
// touches it.
//
// # Engines
//
// The embedded store's log is a file (OpenFile): one line per record,
// "HASH SP CANONICAL-JSON LF". One goroutine writes it: it takes every
// append that arrived while it wrote the previous batch, chains them,
// writes them with one write and one fsync, and only then answers them
// (group commit: under load one fsync serves many records). A crash can
// leave a torn last line; OpenFile removes it (it was never acknowledged)
// and continues the chain from the last whole record. A write or fsync
// that fails leaves the file in a state the process cannot know, so every
// later append fails too, until pawld is restarted and OpenFile recovers
// the file.
//
// A shared store's log is in Redis (OpenRedis), under the store's hash tag
// and outside the keys compaction touches: a list of the same lines, and a
// head key holding the last record's sequence and hash. Several replicas
// append to one chain: a replica chains a batch onto the head it last saw
// and appends it with a script that commits only if the head is still
// that one; otherwise it chains the batch again onto the head the script
// returned, and tries again. A record is as durable as Redis makes it
// (see package redisstore).
//
// # Request IDs
//
// Every call to the server gets a request ID (NewRequestID, WithCall,
// RequestIDFrom), which its record carries and which the server returns in
// the Pawl-Request-Id response header: a receipt names the request ID of
// the promotion that wrote it.
package audit
