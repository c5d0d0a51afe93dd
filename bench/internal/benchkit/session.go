package benchkit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

// SessionHandlers receive what a session hears besides the answers to its
// ACKs. Both are called from the session's reader goroutine, in the
// order of the stream; either may be nil.
type SessionHandlers struct {
	// Assignments gets every set of assignments.
	Assignments func(*pawlv1.WatchAssignmentsResponse)
	// Watch gets every message of every watch of the session.
	Watch func(*pawlv1.SessionWatchMessage)
}

// Session is one instance's SessionService.Session stream, as the
// benchmark fleets drive it: a hello, then ACKs answered in order and
// watches opened by ID, with one goroutine reading the stream.
type Session struct {
	// Record is the registration the session holds (SessionStarted).
	Record *pawlv1.InstanceRecord

	stream *connect.BidiStreamForClient[pawlv1.SessionRequest, pawlv1.SessionResponse]
	h      SessionHandlers
	cancel context.CancelFunc
	done   chan struct{}

	sendMu sync.Mutex // a stream's Send is not safe for concurrent use

	mu      sync.Mutex
	nextAck uint64
	waiting map[uint64]chan *pawlv1.SessionAckResult
	err     error // why the stream ended, once it has
}

// OpenSession opens a session with hello, waits for SessionStarted, and
// reads the stream until Close.
func OpenSession(ctx context.Context, client pawlv1connect.SessionServiceClient, hello *pawlv1.SessionHello, h SessionHandlers) (*Session, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &Session{stream: client.Session(ctx), h: h, cancel: cancel, done: make(chan struct{}),
		waiting: map[uint64]chan *pawlv1.SessionAckResult{}}
	if err := s.stream.Send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_Hello{Hello: hello}}); err != nil {
		cancel()
		return nil, fmt.Errorf("session hello: %w", err)
	}
	first, err := s.stream.Receive()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("session of %s: %w", hello.GetInstance().GetWorkloadIdentity(), err)
	}
	if first.GetStarted() == nil {
		cancel()
		return nil, errors.New("session: the first message is not SessionStarted")
	}
	s.Record = first.GetStarted().GetRecord()
	s.handle(first)
	go s.read()
	return s, nil
}

func (s *Session) read() {
	defer close(s.done)
	for {
		msg, err := s.stream.Receive()
		if err != nil {
			s.mu.Lock()
			s.err = err
			for id, ch := range s.waiting {
				close(ch)
				delete(s.waiting, id)
			}
			s.mu.Unlock()
			return
		}
		s.handle(msg)
	}
}

func (s *Session) handle(msg *pawlv1.SessionResponse) {
	if a := msg.GetAssignments(); a != nil && s.h.Assignments != nil {
		s.h.Assignments(a)
	}
	for _, r := range msg.GetAcks() {
		s.mu.Lock()
		ch := s.waiting[r.GetAckId()]
		delete(s.waiting, r.GetAckId())
		s.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	if s.h.Watch != nil {
		for _, w := range msg.GetWatches() {
			s.h.Watch(w)
		}
	}
}

func (s *Session) send(req *pawlv1.SessionRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(req)
}

// Ack sends ack on the session and returns the server's answer to it: the
// ACK as stored (durable), or the refusal.
func (s *Session) Ack(ctx context.Context, ack *pawlv1.Ack) (*pawlv1.SessionAckResult, error) {
	ch := make(chan *pawlv1.SessionAckResult, 1)
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("session ended: %w", s.err)
	}
	s.nextAck++
	id := s.nextAck
	s.waiting[id] = ch
	s.mu.Unlock()
	if err := s.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_Ack{Ack: &pawlv1.SessionAck{AckId: id, Ack: ack}}}); err != nil {
		return nil, fmt.Errorf("send ACK: %w", err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			s.mu.Lock()
			defer s.mu.Unlock()
			return nil, fmt.Errorf("session ended before the ACK's answer: %w", s.err)
		}
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Watch opens watch id on the session; its messages go to the Watch
// handler.
func (s *Session) Watch(id int64, req *pawlv1.WatchRequest) error {
	return s.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_WatchCreate{WatchCreate: &pawlv1.SessionWatchCreate{WatchId: id, Watch: req}}})
}

// Close ends the session and waits for its reader.
func (s *Session) Close() {
	s.sendMu.Lock()
	_ = s.stream.CloseRequest()
	s.sendMu.Unlock()
	s.cancel()
	<-s.done
	_ = s.stream.CloseResponse()
}
