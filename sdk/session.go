package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

// session is the client's one SessionService stream at a time: the
// follow goroutine opens it (runSession), and everything the instance says
// and hears travels on it: its registration and lease, its assignments,
// its ACKs (numbered per stream, answered in order) and the watches of its
// spaces (each with an ID). When a stream breaks, the next one resumes
// the registration, the assignments after the last revision taken, every
// ACK not yet answered (with the same report_id, so that the server
// answers one it recorded with its record instead of judging it twice),
// and each space's watch from its revision.
//
// A server without the service (it answers Unimplemented: an older
// pawld) is remembered, per server of the client's list, for
// DefaultSessionRetry, and the client uses the unary calls and streams
// there, as before sessions: Register and WatchAssignments,
// RolloutService.Ack, KVService.Watch. Then it asks that server for a
// session again (it may have been upgraded).
//
// Lock order: a stream's sendMu, then mu. The receive loop takes mu only
// briefly, and never while a Send waits.
type session struct {
	c      *Client
	client pawlv1connect.SessionServiceClient
	// servers is how many servers the client was given: the answer
	// Unimplemented is remembered for each.
	servers int

	mu sync.Mutex
	// live is the stream that started (nil between streams).
	live *sessionStream
	// changed is closed, and replaced, when live or a server's path
	// changes.
	changed chan struct{}
	// pending holds the ACKs not yet answered, in the order they came.
	pending []*pendingAck
	// unary holds, for the servers (by index in the list) that had no
	// session, until when the client uses their unary calls.
	unary map[int64]time.Time
	// nextWatch numbers the watches; IDs are never reused in a boot.
	nextWatch int64
}

// sessionStream is one session stream, from its start until it breaks.
type sessionStream struct {
	stream *connect.BidiStreamForClient[pawlv1.SessionRequest, pawlv1.SessionResponse]
	// at is the server it is open to; cancel ends it.
	at     int64
	cancel context.CancelCauseFunc
	// sendMu serializes Send, and the numbering of ACKs with it.
	sendMu  sync.Mutex
	nextAck uint64
	// batches says the server takes several ACKs in one message
	// (SessionStarted.takes_ack_batches); set before the stream is live.
	batches bool
	// sent and watches are guarded by the session's mu: the ACKs sent on
	// this stream by ack_id, and its open watches by ID.
	sent    map[uint64]*pendingAck
	watches map[int64]*sessionWatch
}

// pendingAck is an ACK waiting for its answer.
type pendingAck struct {
	ack *pawlv1.Ack
	// on is the stream it was last sent on (nil: to send on the next);
	// guarded by the session's mu.
	on   *sessionStream
	done chan ackAnswer // buffered: the answer is never waited for
}

type ackAnswer struct {
	ack *pawlv1.Ack
	err error
}

// errNoSession says the server in use has no session: use the unary call.
var errNoSession = errors.New("sdk: the server has no session service")

// newSession returns the client's session, or nil when it follows no
// assignments (a session speaks for an instance) or WithoutSession says
// not to use one.
func newSession(c *Client, httpClient *http.Client, baseURL string, servers int, opts []connect.ClientOption) *session {
	if !c.cfg.assignments || c.cfg.noSession {
		return nil
	}
	hc := *httpClient
	hc.Transport = http2Check{next: hc.Transport}
	return &session{
		c: c, client: pawlv1connect.NewSessionServiceClient(&hc, baseURL, opts...), servers: servers,
		changed: make(chan struct{}), unary: map[int64]time.Time{},
	}
}

// at is the index of the server in use.
func (s *session) at() int64 {
	if s.c.servers == nil {
		return 0
	}
	return s.c.servers.cur.Load() % int64(s.servers)
}

// use says whether to open a session on the server in use, and which
// server that is.
func (s *session) use() (int64, bool) {
	if s == nil {
		return 0, false
	}
	at := s.at()
	s.mu.Lock()
	defer s.mu.Unlock()
	return at, !s.unaryAtLocked(at)
}

// unaryLocked says whether the server in use has no session. The caller
// holds mu.
func (s *session) unaryLocked() bool { return s.unaryAtLocked(s.at()) }

// unaryAtLocked says whether server at had no session, less than the
// retry ago. The caller holds mu.
func (s *session) unaryAtLocked(at int64) bool {
	until, ok := s.unary[at]
	return ok && time.Now().Before(until)
}

// unaryUntil is until when the server in use is followed by its unary
// calls (zero when it is not, or the client has no session).
func (s *session) unaryUntil() time.Time {
	if s == nil {
		return time.Time{}
	}
	at := s.at()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unary[at]
}

// fallBack remembers that server at has no session: the ACKs waiting for
// one go by the unary call, and the watches waiting for one by
// KVService.Watch.
func (s *session) fallBack(at int64, err error) {
	retry := time.Now().Add(s.c.cfg.sessionRetry)
	s.c.cfg.log.Info("pawl: the server has no session service (an older server); using its unary calls and streams",
		"server", s.c.Server(), "error", err, "asks_again_at", retry)
	s.mu.Lock()
	s.unary[at] = retry
	waiting := s.pending
	s.pending = nil
	s.signalLocked()
	s.mu.Unlock()
	for _, p := range waiting {
		p.done <- ackAnswer{err: errNoSession}
	}
}

// signalLocked wakes whoever waits for a change. The caller holds mu.
func (s *session) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// errMoved ends a session whose server the client moved on from.
var errMoved = errors.New("sdk: the client moved on to another server")

// moved ends the live stream when the client moved on from its server
// (a watch said that server cannot follow the store): the next one opens
// to the server now in use.
func (s *session) moved() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live != nil && s.live.at != s.at() {
		s.live.cancel(errMoved)
	}
}

// errNoStart ends a session the server did not answer in time.
var errNoStart = errors.New("sdk: the server did not answer the session's hello")

// noSession says an error means the server has no session service: it
// answered Unimplemented (an older server; or the way to it does not
// carry HTTP/2, see http2Check), or nothing at all within the time a
// session's start is given (DefaultSessionStart).
func noSession(err error) bool { return connect.CodeOf(err) == connect.CodeUnimplemented }

// runSession runs one session on server at until it breaks: the hello,
// then every message, in field order (started, assignments, ACK answers,
// watch messages). It returns why it ended.
func (c *Client) runSession(ctx context.Context, at int64, as *assignmentState, b *backoff) (err error) {
	s := c.sess
	ctx, cancel := context.WithCancelCause(ctx)
	st := &sessionStream{stream: s.client.Session(ctx), at: at, cancel: cancel, sent: map[uint64]*pendingAck{}, watches: map[int64]*sessionWatch{}}
	// HTTP/2 notices the end of ctx only once the request's body is
	// done: closing it ends a Receive that waits when ctx ends.
	stopClosing := context.AfterFunc(ctx, func() { _ = st.stream.CloseRequest() })
	var resend sync.WaitGroup
	defer func() {
		cancel(nil)
		stopClosing()
		resend.Wait()
		_ = st.stream.CloseRequest()
		_ = st.stream.CloseResponse()
		s.end(st, err)
	}()
	// A session that nothing answers (a proxy on the way that holds a
	// request until its body ends, as HTTP/1.1 ones do) is given up
	// after a while, as if the server had none.
	timer := time.AfterFunc(c.cfg.sessionStart, func() { cancel(errNoStart) })
	defer timer.Stop()
	// Shared events: a change that several spaces' watches get comes
	// once (watchMessage hands it to each); a server that predates them
	// sends a message per watch, which watchMessage handles alike.
	// Inline releases: each assignment comes with its release, which
	// then needs no download (except those of the assignments held: the
	// client has them); a server that predates them sends none.
	hello := &pawlv1.SessionHello{
		Instance: c.instance(), MembershipEpoch: c.epoch.Load(), AssignmentsAfterRevision: as.after,
		SharedEvents: true, InlineReleases: true, HeldReleases: heldOf(as.set),
	}
	if err := st.stream.Send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_Hello{Hello: hello}}); err != nil && !errors.Is(err, io.EOF) {
		return err // io.EOF: the server ended the stream, and Receive says why
	}
	started := false
	for {
		msg, err := st.stream.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				// The server ended the session (it is shutting down): the
				// client is cut off until it reconnects.
				err = connect.NewError(connect.CodeUnavailable, fmt.Errorf("the server ended the session: %w", io.EOF))
			}
			if ctx.Err() != nil {
				switch cause := context.Cause(ctx); {
				case errors.Is(cause, errMoved):
					return connect.NewError(connect.CodeUnavailable, cause)
				case errors.Is(cause, errNoStart):
					return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("%w within %s", cause, c.cfg.sessionStart))
				}
				if errors.Is(err, context.Canceled) {
					return ctx.Err()
				}
			}
			return err
		}
		b.reset()
		if msg.GetStarted() != nil && !started {
			// The epoch is kept before the link says it works, so that a
			// Status that reads Connected also reads Registered.
			if err := c.registered(msg.GetStarted().GetRecord()); err != nil {
				return connect.NewError(connect.CodeInternal, err)
			}
			started = true
			st.batches = msg.GetStarted().GetTakesAckBatches()
			timer.Stop()
			// Sends wait until what was pending is sent again, in its
			// order; the receive loop goes on meanwhile.
			st.sendMu.Lock()
			again := s.publish(st)
			resend.Add(1)
			go func() {
				defer resend.Done()
				defer st.sendMu.Unlock()
				_ = st.sendAcksLocked(s, again) // a failed send is sent again on the next stream
			}()
		}
		if !started {
			return connect.NewError(connect.CodeInternal, errors.New("the server's first session message did not say the session started"))
		}
		c.linkChanged(true, nil)
		c.linkWorks()
		if a := msg.GetAssignments(); a != nil {
			c.take(as, a, msg.GetReleases())
		}
		for _, r := range msg.GetAcks() {
			s.answered(st, r)
		}
		for _, w := range msg.GetWatches() {
			s.watchMessage(st, w)
		}
	}
}

// publish makes st the live stream and returns the pending ACKs, which
// the caller sends on it, holding st's sendMu.
func (s *session) publish(st *sessionStream) []*pendingAck {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = st
	for _, p := range s.pending {
		p.on = st
	}
	s.signalLocked()
	return slices.Clone(s.pending)
}

// end retires st: its ACKs not answered stay pending for the next stream,
// and its watches end with err.
func (s *session) end(st *sessionStream, err error) {
	if err == nil {
		err = connect.NewError(connect.CodeUnavailable, errors.New("the session ended"))
	}
	s.mu.Lock()
	if s.live == st {
		s.live = nil
		s.signalLocked()
	}
	for _, p := range s.pending {
		if p.on == st {
			p.on = nil
		}
	}
	watches := st.watches
	st.watches = map[int64]*sessionWatch{}
	s.mu.Unlock()
	for _, w := range watches {
		w.fail(fmt.Errorf("sdk: the session broke: %w", err))
	}
}

// maxAckBatchBytes bounds the ACKs put together in one message (those
// a broken session left unanswered, sent again on the next): far below
// any server's read limit.
const maxAckBatchBytes = 64 << 10

// maxAcksPerMessage is the most ACKs put in one session message, the
// bound servers keep (SessionAckBatch).
const maxAcksPerMessage = 64

// sendAcksLocked sends ps on st, in order, each with the next ack_id and
// the current membership epoch: together, in messages of up to
// maxAckBatchBytes and maxAcksPerMessage, when the server takes batches, or each in its own
// message, one after another, when it does not. It stops at the first
// send that fails (the stream broke: what was not answered is sent again
// on the next one). The caller holds st.sendMu.
func (st *sessionStream) sendAcksLocked(s *session, ps []*pendingAck) error {
	epoch := s.c.epoch.Load()
	var batch []*pawlv1.SessionAck
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		req := &pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_Ack{Ack: batch[0]}}
		if len(batch) > 1 {
			req = &pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_Acks{Acks: &pawlv1.SessionAckBatch{Acks: batch}}}
		}
		batch, size = nil, 0
		return st.stream.Send(req)
	}
	for _, p := range ps {
		st.nextAck++
		id := st.nextAck
		s.mu.Lock()
		if p.on != st {
			s.mu.Unlock()
			continue // answered, given up, or already given to another stream
		}
		st.sent[id] = p
		s.mu.Unlock()
		// A copy: the ACK may be sent on the next stream while this Send
		// still reads it.
		ack := proto.CloneOf(p.ack)
		ack.MembershipEpoch = epoch
		m := &pawlv1.SessionAck{AckId: id, Ack: ack}
		if !st.batches || len(ps) == 1 {
			// One ACK a message: no size to weigh (an apply's every
			// report comes this way).
			if err := flush(); err != nil {
				return err
			}
			batch = append(batch, m)
			continue
		}
		n := proto.Size(m)
		if size+n > maxAckBatchBytes || len(batch) == maxAcksPerMessage {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, m)
		size += n
	}
	return flush()
}

// send sends one request on st.
func (st *sessionStream) send(req *pawlv1.SessionRequest) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	return st.stream.Send(req)
}

// ack sends an ACK on the session and waits for the server's record of
// it: on the live stream, or on the next one when none is live or the
// live one breaks first. It returns errNoSession when the server turns
// out to have no session (send it by the unary call), and ctx's error
// when ctx ends first.
func (s *session) ack(ctx context.Context, ack *pawlv1.Ack) (*pawlv1.Ack, error) {
	p := &pendingAck{ack: ack, done: make(chan ackAnswer, 1)}
	s.mu.Lock()
	if s.unaryLocked() {
		s.mu.Unlock()
		return nil, errNoSession
	}
	s.pending = append(s.pending, p)
	st := s.live
	p.on = st
	s.mu.Unlock()
	if st != nil {
		st.sendMu.Lock()
		_ = st.sendAcksLocked(s, []*pendingAck{p}) // a failed send is sent again on the next stream
		st.sendMu.Unlock()
	}
	select {
	case a := <-p.done:
		return a.ack, a.err
	case <-ctx.Done():
		s.mu.Lock()
		s.forgetLocked(p)
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// forgetLocked removes p from the pending ACKs. The caller holds mu.
func (s *session) forgetLocked(p *pendingAck) {
	if i := slices.Index(s.pending, p); i >= 0 {
		s.pending = slices.Delete(s.pending, i, i+1)
	}
	p.on = nil
}

// answered hands the answer to an ACK sent on st to its sender.
func (s *session) answered(st *sessionStream, r *pawlv1.SessionAckResult) {
	s.mu.Lock()
	p := st.sent[r.GetAckId()]
	delete(st.sent, r.GetAckId())
	if p != nil {
		s.forgetLocked(p)
	}
	s.mu.Unlock()
	if p == nil {
		return
	}
	if e := r.GetError(); e != nil {
		p.done <- ackAnswer{err: sessionError(e)}
		return
	}
	p.done <- ackAnswer{ack: r.GetAck()}
}

// sessionError turns a refusal within the session into the Connect error
// the unary call would have returned.
func sessionError(e *pawlv1.SessionError) error {
	var code connect.Code
	if code.UnmarshalText([]byte(e.GetCode())) != nil {
		code = connect.CodeUnknown
	}
	return connect.NewError(code, errors.New(e.GetMessage()))
}

// http2Check turns an answer 505 (HTTP Version Not Supported) into
// Unimplemented: a server that got the session over HTTP/1.1 (a proxy on
// the way that does not carry HTTP/2) cannot hold one, and the client
// uses the unary calls there.
type http2Check struct{ next http.RoundTripper }

func (t http2Check) RoundTrip(req *http.Request) (*http.Response, error) {
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusHTTPVersionNotSupported {
		_ = resp.Body.Close()
		return nil, connect.NewError(connect.CodeUnimplemented,
			fmt.Errorf("%s answered HTTP 505: the way to it does not carry HTTP/2, which a session needs", req.URL.Host))
	}
	return resp, err
}
