package sdk

import (
	"context"
	"errors"
	"sync"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// watchStream is one watch of a space, as Space.watch reads it: a
// KVService.Watch stream, or a watch on the session.
type watchStream interface {
	Receive() bool
	Msg() *pawlv1.WatchResponse
	Err() error
	Close() error
}

var _ watchStream = (*connect.ServerStreamForClient[pawlv1.WatchResponse])(nil)
var _ watchStream = (*sessionWatch)(nil)

// openWatch opens a watch: on the session when the client has one and
// the server in use holds sessions, else as a KVService.Watch stream. A
// session watch waits for a live session (or ctx).
func (c *Client) openWatch(ctx context.Context, req *pawlv1.WatchRequest) (watchStream, error) {
	if c.sess != nil {
		w, err := c.sess.watch(ctx, req)
		if !errors.Is(err, errNoSession) {
			return w, err
		}
	}
	return c.kv.Watch(ctx, connect.NewRequest(req))
}

// sessionWatch is one watch on the session. The session's receive loop
// queues its messages and never waits for the space that reads them: the
// queue is unbounded, as etcd's client buffers each watch of a shared
// stream, so that a slow space delays neither the session's other watches
// nor its ACKs and assignments. The watch ends when the server ends it
// (compacted, an error), when the session breaks (the space resumes on the
// next one from its revision), or at Close.
type sessionWatch struct {
	s   *session
	st  *sessionStream
	id  int64
	ctx context.Context

	mu    sync.Mutex
	queue []*pawlv1.WatchResponse
	err   error         // why it ended, once the queue is read
	ready chan struct{} // signalled (capacity 1) when the queue or err changes
	msg   *pawlv1.WatchResponse
}

// watch opens a watch on the live session, waiting for one. It returns
// errNoSession when the server in use has no session.
func (s *session) watch(ctx context.Context, req *pawlv1.WatchRequest) (*sessionWatch, error) {
	s.mu.Lock()
	for s.live == nil {
		if s.unaryLocked() {
			s.mu.Unlock()
			return nil, errNoSession
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
	}
	st := s.live
	s.nextWatch++
	w := &sessionWatch{s: s, st: st, id: s.nextWatch, ctx: ctx, ready: make(chan struct{}, 1)}
	st.watches[w.id] = w
	s.mu.Unlock()
	// A failed send: the stream broke, and its end ends the watch.
	_ = st.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_WatchCreate{WatchCreate: &pawlv1.SessionWatchCreate{WatchId: w.id, Watch: req}}})
	return w, nil
}

// requestProgress asks every watch open on the live session for a
// progress notification (progress_request): the server sends each one as
// soon as it is current at a revision newer than the last it reported.
// Without a session, or a live one, it does nothing (WaitRevision asks
// again while it waits).
func (s *session) requestProgress() {
	if s == nil {
		return
	}
	s.mu.Lock()
	st := s.live
	s.mu.Unlock()
	if st != nil {
		// A failed send: the stream broke; WaitRevision asks the next.
		_ = st.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_ProgressRequest{ProgressRequest: &pawlv1.SessionProgressRequest{}}})
	}
}

// watchMessage hands a watch message on st to its watch, and to each
// watch it is shared with (SessionWatchMessage.shared_with: the same
// response, for each at this place in its order). A message of a watch
// no longer open (cancelled meanwhile) is dropped; the spaces only read
// a shared response.
func (s *session) watchMessage(st *sessionStream, m *pawlv1.SessionWatchMessage) {
	s.watchMessageFor(st, m.GetWatchId(), m)
	for _, id := range m.GetSharedWith() {
		s.watchMessageFor(st, id, m)
	}
}

// watchMessageFor hands m to watch id.
func (s *session) watchMessageFor(st *sessionStream, id int64, m *pawlv1.SessionWatchMessage) {
	s.mu.Lock()
	w := st.watches[id]
	// The server closes a watch that failed, was cancelled or reported a
	// compaction: nothing more of it follows.
	closed := m.GetError() != nil || m.GetCanceled() || m.GetResponse().GetCompacted() != nil
	if w != nil && closed {
		delete(st.watches, id)
	}
	s.mu.Unlock()
	switch {
	case w == nil:
	case m.GetError() != nil:
		w.fail(sessionError(m.GetError()))
	case m.GetCanceled():
		w.fail(context.Canceled)
	case m.GetResponse() != nil:
		w.push(m.GetResponse(), closed)
	}
}

func (w *sessionWatch) push(m *pawlv1.WatchResponse, last bool) {
	w.mu.Lock()
	if w.err == nil {
		w.queue = append(w.queue, m)
		if last {
			w.err = errors.New("sdk: the watch ended")
		}
	}
	w.mu.Unlock()
	w.signal()
}

// fail ends the watch with err, after what is queued.
func (w *sessionWatch) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.signal()
}

func (w *sessionWatch) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// Receive waits for the watch's next message and reports whether there
// is one; false when the watch ended (see Err) or its context did.
func (w *sessionWatch) Receive() bool {
	for {
		w.mu.Lock()
		if len(w.queue) > 0 {
			w.msg = w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
			w.mu.Unlock()
			return true
		}
		done := w.err != nil
		w.mu.Unlock()
		if done {
			return false
		}
		select {
		case <-w.ready:
		case <-w.ctx.Done():
			w.fail(w.ctx.Err())
		}
	}
}

// Msg is the message Receive received.
func (w *sessionWatch) Msg() *pawlv1.WatchResponse { return w.msg }

// Err is why the watch ended.
func (w *sessionWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close cancels the watch on the session, unless the server already
// closed it or the session broke.
func (w *sessionWatch) Close() error {
	w.fail(context.Canceled)
	w.s.mu.Lock()
	open := w.st.watches[w.id] == w && w.s.live == w.st
	delete(w.st.watches, w.id)
	w.s.mu.Unlock()
	if open {
		_ = w.st.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_WatchCancel{WatchCancel: &pawlv1.SessionWatchCancel{WatchId: w.id}}})
	}
	return nil
}
