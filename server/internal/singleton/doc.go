// Package singleton runs work that must happen on one server at a time
// (the rollout supervisor, compaction) when several servers share a store:
// under a named lease of the store (store.Leaser), renewed while the work
// runs, with the lease's fencing token in the work's context, so that a
// server that lost its lease cannot write any more even before it notices.
// When the holder dies, its lease expires and another server takes the
// work over. With a store no other server shares, the work just runs.
package singleton
