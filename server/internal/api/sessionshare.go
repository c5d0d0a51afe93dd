package api

import (
	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// eventShare lets a session's writer send the events that several of the
// session's watches get, once (SessionHello.shared_events): the watch
// message of the first watch drained with those events names the others
// in its shared_with. A session with 157 watches of one prefix then
// marshals and writes a change once, not 157 times.
//
// Two promises keep each watch's stream what it would be alone:
//
//   - Same events: a watch joins a message only when its batch (what one
//     Poll returned: a transaction is never split) holds exactly the
//     events of the message's, revision by revision. Watches whose
//     prefixes or start revisions make them see different parts of a
//     change get messages of their own, each with its own part; a watch
//     sees nothing before its start, since its batches never hold it.
//   - Same order: a watch joins a message only when that message comes
//     after the watch's latest message in the SessionResponse being
//     filled (the client hands the messages out in list order), so that
//     none of its messages moves ahead of an earlier one; then the
//     watch's latest message is that one.
//
// Only events are shared; a watch's started, progress, stale, compacted,
// error and canceled messages stay its own. The state covers the
// SessionResponse being filled: reset starts the next. A nil *eventShare
// (a session that did not ask) shares nothing, and every method is a
// no-op on it. Owned by the session's writer.
type eventShare struct {
	// last is, per watch ID, the index in the message's watches of the
	// watch's latest message.
	last map[int64]int
	// byEvents is the newest events message of each set of events, by
	// its first and last revisions and size.
	byEvents map[eventsKey]sharedEvents
}

// eventsKey finds the candidates among a message's events messages for
// a batch; sameEvents decides.
type eventsKey struct {
	first, last int64
	n           int
}

// sharedEvents is an events message of the SessionResponse being filled.
type sharedEvents struct {
	at     int           // its index in the response's watches
	events []store.Event // what it carries
}

// sharedWatchIDBytes is about what one more watch ID costs a shared
// message, for the writer's count of a message's bytes.
const sharedWatchIDBytes = 8

func newEventShare() *eventShare {
	return &eventShare{last: map[int64]int{}, byEvents: map[eventsKey]sharedEvents{}}
}

// reset starts a new SessionResponse.
func (e *eventShare) reset() {
	if e == nil {
		return
	}
	clear(e.last)
	clear(e.byEvents)
}

// placed records that watch id's latest message is at index at.
func (e *eventShare) placed(id int64, at int) {
	if e != nil {
		e.last[id] = at
	}
}

// find returns the index of the message that watch id may join with the
// batch events: one with the same events, after the watch's latest
// message. ok is unset when there is none.
func (e *eventShare) find(id int64, events []store.Event) (at int, ok bool) {
	if e == nil || len(events) == 0 {
		return 0, false
	}
	c, ok := e.byEvents[keyOf(events)]
	if !ok || !sameEvents(c.events, events) {
		return 0, false
	}
	if last, ok := e.last[id]; ok && last >= c.at {
		return 0, false
	}
	return c.at, true
}

// offer makes the events message at index at one that later watches with
// the same events may join.
func (e *eventShare) offer(at int, events []store.Event) {
	if e == nil || len(events) == 0 {
		return
	}
	e.byEvents[keyOf(events)] = sharedEvents{at: at, events: events}
}

func keyOf(events []store.Event) eventsKey {
	return eventsKey{first: events[0].Revision(), last: events[len(events)-1].Revision(), n: len(events)}
}

// sameEvents reports whether a and b are the same changes: a revision
// names one change of the store's history.
func sameEvents(a, b []store.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Revision() != b[i].Revision() || a[i].KV.Key != b[i].KV.Key {
			return false
		}
	}
	return true
}

// putWatch adds one watch message to msg.
func (s *session) putWatch(msg *pawlv1.SessionResponse, m *pawlv1.SessionWatchMessage) {
	msg.Watches = append(msg.Watches, m)
	s.share.placed(m.GetWatchId(), len(msg.Watches)-1)
}

// putBatch adds what one Poll of watch id returned to msg: it joins a
// message with the same events when the session shares events and one
// may be joined, and is a message of its own otherwise. It returns about
// the bytes it added.
func (s *session) putBatch(msg *pawlv1.SessionResponse, id int64, b watch.Batch) int {
	if at, ok := s.share.find(id, b.Events); ok {
		m := msg.Watches[at]
		m.SharedWith = append(m.SharedWith, id)
		s.share.placed(id, at)
		return sharedWatchIDBytes
	}
	s.putWatch(msg, &pawlv1.SessionWatchMessage{WatchId: id, Response: toProtoBatch(b)})
	s.share.offer(len(msg.Watches)-1, b.Events)
	size := 0
	for _, ev := range b.Events {
		size += len(ev.KV.Key) + len(ev.KV.Value) + 64
	}
	return size
}
