// Package watch is the in-process watch hub: it fans the events a store
// commits out to many watchers, each under a key prefix and from a start
// revision, in revision order and without gaps. Hub's type comment explains
// the design: a shared bounded ring, per-watcher cursors, and catch-up from
// the store's change log for watchers that fall behind. A Group lets one
// goroutine serve many watchers (a session's): they share one wake-up,
// and its owner drains the ready ones with Watcher.Poll.
package watch
