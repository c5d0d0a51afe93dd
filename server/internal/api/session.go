package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/auth"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/metrics"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// Sessions is the SessionService handler.
//
// A session has one goroutine of its own while it has nothing to send:
// the handler's, which receives (the hello, then ACKs and watch
// requests). Whatever the session says (the ACKs' answers, the
// assignments and the messages of every watch, several of them in one
// SessionResponse when they are pending together) is sent by a writer, a
// goroutine started when something becomes pending (kick) and ended when
// nothing is left, so that an idle session holds no writer's stack: at
// most one writes at a time, and one kicked while it writes looks again
// before it ends. The watchers of a session (its assignment watcher on
// the release records and its key-space watches) form one watch.Group,
// whose wake-up is that kick (kickBehind, which lets the write's own
// answer go first): the hub wakes the session once for all of them, and
// the writer drains every ready watcher with Poll; a session has no
// goroutine per watch. A message may carry several ACKs
// (SessionAckBatch, which SessionStarted advertises): they are taken as
// that many ack messages, one after another, except that each is judged
// only once the one of its config before it was recorded. When the hello
// asks for shared events, the events that several of the session's
// watches get go once in a message, with the IDs of all of them
// (eventShare). ACKs are submitted, in the order they came, to the
// rollout domain's batches (rollout.Rollouts.SubmitAckWaitFunc, or a
// batch message's rollout.AckChain), which judge one instance's ACKs in
// that order and commit many sessions' ACKs in one store transaction;
// each is answered, in that order too, once its record and its audit
// record are durable (at most MaxAcksInFlight unanswered per session;
// the receiver waits past that, and while the batches' queue is full).
// Nothing waits for an ACK's outcome by parking a goroutine: the batches call back when the
// record is durable, which queues the audit record
// (audit.Log.AppendAsync), whose writer calls back when that is durable,
// which sets the answer and wakes the session's writer. A fleet's ACKs
// in flight cost their answers' memory, not a goroutine's stack each.
type Sessions struct {
	tracer     trace.Tracer // nil: no spans of ACKs
	instances  *Instances
	inline     *inlineReleases
	store      store.Store
	maxWatches int
	log        *slog.Logger
	// answering counts the ACKs taken and not yet answered (recorded or
	// refused, and audited), which outlive a session that ended on an
	// error (Wait).
	answering sync.WaitGroup
	// mu guards running, the sessions past their hello whose handler
	// has not returned, and closing, set by Wait: no session opens
	// after it. ended is signalled when running falls to 0.
	mu      sync.Mutex
	ended   *sync.Cond
	running int
	closing bool
}

var _ pawlv1connect.SessionServiceHandler = (*Sessions)(nil)

// MaxSessionWatchesFlag is the pawld flag that bounds the watches of one
// session, which a refusal names.
const MaxSessionWatchesFlag = "--max-session-watches"

// NewSessions returns the SessionService handler: registrations, leases
// and assignments as instances' InstanceService does (with the releases of
// rels, for a session that asks for them inline), ACKs as
// RolloutService.Ack, watches of st as KVService.Watch, at most
// maxWatches open per session.
func NewSessions(instances *Instances, rels *release.Releases, st store.Store, maxWatches int, log *slog.Logger, opts ...SessionOption) *Sessions {
	h := &Sessions{instances: instances, inline: newInlineReleases(rels), store: st, maxWatches: maxWatches, log: log}
	h.ended = sync.NewCond(&h.mu)
	for _, opt := range opts {
		opt(h)
	}
	return h
}

// SessionOption configures NewSessions.
type SessionOption func(*Sessions)

// WithSessionTracing makes a server span of every ACK a session carries
// in tp's traces, as TraceInterceptors makes one of every
// RolloutService.Ack call: named like that call's, a child of the span
// the ACK's traceparent names (else of the session's own span), ended
// when the ACK is answered. A session is one call, so the interceptors
// alone would give its ACKs no span of their own.
func WithSessionTracing(tp trace.TracerProvider) SessionOption {
	return func(h *Sessions) { h.tracer = tp.Tracer("github.com/pawlcfg/pawl/server/internal/api") }
}

// ackSpanName is the name of an ACK's server span, on a session or not.
var ackSpanName = strings.TrimPrefix(pawlv1connect.RolloutServiceAckProcedure, "/")

// ackSpan starts the server span of one ACK of a session, or returns nil
// without tracing.
func (h *Sessions) ackSpan(ctx context.Context, traceparent string) trace.Span {
	if h.tracer == nil {
		return nil
	}
	if id, err := rollout.TraceID(traceparent); err == nil && id != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{traceparentHeader: traceparent})
	}
	_, span := h.tracer.Start(ctx, ackSpanName, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("rpc.system", "connect_rpc"), attribute.String("rpc.service", "pawl.v1.RolloutService"),
		attribute.String("rpc.method", "Ack"), attribute.Bool("pawl.session", true)))
	return span
}

const (
	// MaxAcksPerMessage bounds the ACKs of one SessionAckBatch: a message
	// over it ends the session with INVALID_ARGUMENT.
	MaxAcksPerMessage = 64
	// MaxAcksInFlight bounds the ACKs of one session received and not yet
	// answered: enough to keep a batching store busy from one instance,
	// small enough that a session holds little while its client does not
	// read. Past it the session's next ACK, read, waits to be taken, and
	// nothing more of the session is read, until an answer is handed to
	// the writer (the client's sends wait on HTTP/2's flow control).
	MaxAcksInFlight = 256
	// maxSessionMessageBytes is about the most key and value bytes of
	// watch events the writer puts in one SessionResponse before it sends
	// it and goes on in the next, far below the 4 MiB a gRPC client reads
	// by default. (One watch's batch is not split: a transaction travels
	// in one message, as on KVService.Watch.)
	maxSessionMessageBytes = 1 << 20
	// sessionCommands is how many watch requests the receiver queues for
	// the writer before it waits for the writer to take them, and the
	// most the writer carries out for one message.
	sessionCommands = 64
)

func noHello() error {
	return InvalidArgument("the first message of a session must be a hello (SessionHello): register or resume first")
}

// Session implements pawl.v1.SessionService.Session.
func (h *Sessions) Session(ctx context.Context, stream *connect.BidiStream[pawlv1.SessionRequest, pawlv1.SessionResponse]) error {
	first, err := stream.Receive()
	switch {
	case errors.Is(err, io.EOF):
		return noHello()
	case err != nil:
		return err
	case first.GetHello() == nil:
		return noHello()
	}
	if !h.enter() {
		return connect.NewError(connect.CodeUnavailable, errors.New("the server is shutting down: open the session on another replica"))
	}
	defer h.leave()
	hello := first.GetHello()
	rec, release, err := h.open(ctx, stream.Spec(), stream.Peer().Addr, hello)
	if err != nil {
		return err
	}
	s := &session{
		h: h, identity: rec.WorkloadIdentity, boot: rec.BootID,
		send: stream.Send, idle: make(chan struct{}, 1), cmds: make(chan *pawlv1.SessionRequest, sessionCommands),
		slots: make(chan struct{}, MaxAcksInFlight), watches: map[int64]*sessionWatch{}, byW: map[*watch.Watcher]*sessionWatch{},
		spec: stream.Spec(), lag: metrics.FromContext(ctx), msg: &pawlv1.SessionResponse{},
	}
	s.joinHub(h.instances.hub)
	if hello.GetSharedEvents() {
		s.share = newEventShare()
	}
	if hello.GetInlineReleases() {
		s.inline = h.inline
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.guards = guardsFrom(ctx)
	s.assign = &assignmentStream{identity: s.identity, deltas: true, rollouts: h.instances.rollouts}
	// The handler writes first (the started message and the first
	// assignments), holding the writer's role; kicks meanwhile are
	// seen when it lets go.
	s.wstate.Store(writerRunning)
	if err := s.start(h.instances.toProto(rec), hello.GetAssignmentsAfterRevision(), heldReleases(hello)); err != nil {
		s.stop(err)
	} else if !s.yield() {
		go s.run()
	}
	rerr := s.receive(stream)
	if errors.Is(rerr, io.EOF) {
		// The client is done sending: its ACKs still get their answers.
		s.acks.Wait()
	} else {
		s.cancel()
	}
	werr := s.stopWriting()
	if werr == nil && errors.Is(rerr, io.EOF) {
		// The last answers, which a writer may not have sent yet.
		msg := s.msg
		s.takeAnswers(msg)
		if len(msg.Acks) > 0 {
			werr = s.ended(s.send(msg))
		}
	}
	s.cancel()
	if werr == nil {
		// The session ends from the client's side: its last answers
		// are sent, so they are awaited. A session the server ends (this
		// replica cannot follow its store) ends at once: an answer can no
		// longer be sent, the client sends the ACK again on its next
		// session, and the answer's audit record (which can take a while
		// when the store cannot be reached) finishes under Wait.
		s.acks.Wait()
	}
	// The lease runs a full term from now; then the watchers close (the
	// writer, their owner, has ended), so that a session counted open
	// still holds.
	release()
	s.closeWatchers()
	switch {
	case werr != nil:
		return werr
	case errors.Is(rerr, io.EOF), ctx.Err() != nil:
		return nil
	}
	return rerr
}

// Wait waits until every session past its hello has ended (the hub is
// closed, which ends them), and every ACK they took is recorded or
// refused, and audited; a session whose hello comes later is refused.
// Call it after the server stopped serving and closed the hub, before
// closing the audit log and the store: a session's handler can outlive
// the HTTP server's shutdown, which does not wait for the streams of
// connections it no longer tracks (h2c's).
func (h *Sessions) Wait() {
	h.mu.Lock()
	h.closing = true
	for h.running > 0 {
		h.ended.Wait()
	}
	h.mu.Unlock()
	h.answering.Wait()
}

// enter counts a session past its hello, unless Wait began.
func (h *Sessions) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.running++
	return true
}

// leave ends what enter counted.
func (h *Sessions) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running--; h.running == 0 {
		h.ended.Broadcast()
	}
}

// open registers or resumes the hello's instance and holds its lease:
// it returns the registration and the release of the hold.
func (h *Sessions) open(ctx context.Context, spec connect.Spec, peer string, hello *pawlv1.SessionHello) (instance.Record, func(), error) {
	in := hello.GetInstance()
	identity, boot, epoch := in.GetWorkloadIdentity(), in.GetBootId(), hello.GetMembershipEpoch()
	switch {
	case in == nil:
		return instance.Record{}, nil, InvalidArgument("hello.instance is required")
	case epoch < 0:
		return instance.Record{}, nil, InvalidArgument("hello.membership_epoch is %d; it must be 0 (register) or the epoch of the registration to resume", epoch)
	case boot == "":
		return instance.Record{}, nil, InvalidArgument("hello.instance.boot_id is required (a new one on every process start)")
	}
	if err := h.instances.checkAfterRevision(ctx, spec, "hello.assignments_after_revision", hello.GetAssignmentsAfterRevision()); err != nil {
		return instance.Record{}, nil, err
	}
	registry := h.instances.registry
	if epoch == 0 {
		rec, err := h.instances.register(ctx, in, peer)
		var resp any
		if err == nil {
			resp = &pawlv1.RegisterResponse{Record: h.instances.toProto(rec)}
		}
		if err := recordMessage(ctx, pawlv1connect.InstanceServiceRegisterProcedure, &pawlv1.RegisterRequest{Instance: in}, resp, Error(h.log, spec, err)); err != nil {
			return instance.Record{}, nil, err
		}
		epoch = rec.MembershipEpoch
	} else {
		rec, err := registry.Registration(ctx, identity, boot)
		switch {
		case errors.Is(err, instance.ErrNotFound):
			return instance.Record{}, nil, newError(connect.CodeFailedPrecondition,
				"%s is not registered: register again (hello.membership_epoch 0)", identity)
		case err != nil:
			return instance.Record{}, nil, Error(h.log, spec, err)
		case rec.BootID != boot || rec.MembershipEpoch != epoch:
			return instance.Record{}, nil, newError(connect.CodeFailedPrecondition,
				"%s is registered with boot %s at membership epoch %d, not boot %s at epoch %d: register again (hello.membership_epoch 0)",
				identity, rec.BootID, rec.MembershipEpoch, boot, epoch)
		}
		if p, ok := auth.PrincipalFrom(ctx); ok && p.Method != auth.MethodOpen && !p.IsAdmin() && rec.Principal != p.Name {
			h.log.Warn("refused a session resuming a registration another principal made", "principal", p.Name, "identity", identity)
			return instance.Record{}, nil, newError(connect.CodePermissionDenied,
				"%s resumes a registration another principal made: principal %q may resume only its own", spec.Procedure, p.Name)
		}
	}
	release, err := registry.Hold(ctx, identity, boot)
	if err != nil {
		return instance.Record{}, nil, Error(h.log, spec, err)
	}
	rec, err := registry.Get(ctx, identity)
	if err == nil && (rec.BootID != boot || rec.MembershipEpoch != epoch) {
		err = fmt.Errorf("%w: %s registered again meanwhile (epoch %d)", instance.ErrStaleBoot, identity, rec.MembershipEpoch)
	}
	if err != nil {
		release()
		return instance.Record{}, nil, Error(h.log, spec, err)
	}
	return rec, release, nil
}

// submitAck queues one ACK of a session for the rollout domain's next
// batch: done gets its result once its record is durable (or it was
// refused), and must not block. When the queue of ACKs to record is
// full, it waits for room (rollout.Rollouts.SubmitAckWaitFunc): the
// session then reads no more of its stream, and HTTP/2's flow control
// holds its client, rather than the ACK being refused and sent again.
// A batch's ACKs go through a rollout.AckChain, which waits alike.
func (h *Sessions) submitAck(ctx context.Context, ack rollout.Ack, done func(rollout.AckResult)) {
	h.instances.rollouts.SubmitAckWaitFunc(ctx, ack, done)
}

// session is one open session.
type session struct {
	h              *Sessions
	ctx            context.Context // ends with the session
	cancel         context.CancelFunc
	identity, boot string
	spec           connect.Spec
	lag            *metrics.Metrics
	send           func(*pawlv1.SessionResponse) error
	// guards are the stream's message guards, read off its context once,
	// not for each ACK.
	guards messageGuards

	// The writer: wstate is writerIdle, writerRunning, writerAgain or
	// writerStopped (kick, yield, stopWriting); idle has a value after a
	// writer ended; werr (under mu) is the error that ended the
	// writing, if the session did not end from the receiving side.
	wstate atomic.Int32
	idle   chan struct{}
	werr   error
	// closing is set once the handler ends the session: the writer then
	// ends after its round, kicked or not.
	closing atomic.Bool
	// cmds are the watch requests in the order received.
	cmds chan *pawlv1.SessionRequest

	// ACKs: slots counts those received and not yet answered; acks counts
	// those whose answer is not set yet; answers (under mu) are in the
	// order received, each answered once result is set.
	slots   chan struct{}
	acks    sync.WaitGroup
	mu      sync.Mutex
	answers []*ackAnswer

	// Owned by the writer (one goroutine at a time).
	msg     *pawlv1.SessionResponse // reused: Send has marshaled it when it returns
	group   *watch.Group
	assign  *assignmentStream
	assignW *watch.Watcher
	watches map[int64]*sessionWatch
	byW     map[*watch.Watcher]*sessionWatch
	// behind are watchers the writer did not drain in the last message
	// (it was full), in the order to continue.
	behind []*sessionWatch
	// share, when the hello asked for shared events, sends the events
	// that several watches get once per message; nil otherwise.
	share *eventShare
	// inline, when the hello asked for inline releases, puts the releases
	// of the assignments in their message; nil otherwise.
	inline *inlineReleases
}

// ackAnswer is the answer to one ACK, once result is set (under
// session.mu).
type ackAnswer struct {
	result *pawlv1.SessionAckResult
	id     uint64
	span   trace.Span   // nil without tracing
	record finishRecord // its audit record, begun
}

// sessionWatch is one key-space watch of a session.
type sessionWatch struct {
	id      int64
	w       *watch.Watcher
	started int64 // the store's revision when it started: older events are history, not fan-out
	closed  bool
	queued  bool // in the writer's list of watches to drain
}

// receive reads the client's messages after the hello until the stream
// ends (io.EOF when the client closed it) or one ends the session.
func (s *session) receive(stream *connect.BidiStream[pawlv1.SessionRequest, pawlv1.SessionResponse]) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			return err
		}
		switch k := msg.GetKind().(type) {
		case *pawlv1.SessionRequest_Hello:
			return InvalidArgument("a session has one hello, its first message: open another session to register again")
		case *pawlv1.SessionRequest_Ack:
			s.lag.SessionAckMessage(1)
			if err := s.ack(k.Ack, nil); err != nil {
				return err
			}
		case *pawlv1.SessionRequest_Acks:
			// As that many ack messages, one after another, except that
			// each is judged only once the one of its config before it
			// was recorded (rollout.AckChain).
			acks := k.Acks.GetAcks()
			if len(acks) > MaxAcksPerMessage {
				return InvalidArgument("the message carries %d ACKs; a session message carries at most %d: send the rest in another", len(acks), MaxAcksPerMessage)
			}
			if len(acks) == 0 {
				continue
			}
			s.lag.SessionAckMessage(len(acks))
			chain := s.h.instances.rollouts.NewAckChain()
			for _, m := range acks {
				if err := s.ack(m, chain); err != nil {
					return err
				}
			}
		case *pawlv1.SessionRequest_WatchCreate, *pawlv1.SessionRequest_WatchCancel, *pawlv1.SessionRequest_ProgressRequest:
			select {
			case s.cmds <- msg:
				s.kick()
			case <-s.ctx.Done():
				return s.ctx.Err()
			}
		default:
			return InvalidArgument("the message sets none of hello, ack, acks, watch_create, watch_cancel or progress_request")
		}
	}
}

// ack takes one ACK: it is answered in its turn, after it is recorded
// or refused. It waits while MaxAcksInFlight ACKs are unanswered, and
// while the rollout domain's queue of ACKs to record is full (submitAck). chain,
// for an ACK of a batch, links it to the one of its config before it in
// the batch (nil: an ACK of its own message).
func (s *session) ack(m *pawlv1.SessionAck, chain *rollout.AckChain) error {
	select {
	case s.slots <- struct{}{}:
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
	a := &ackAnswer{id: m.GetAckId(), span: s.h.ackSpan(s.ctx, m.GetAck().GetTraceparent())}
	s.mu.Lock()
	s.answers = append(s.answers, a)
	s.mu.Unlock()
	// Until its answer is set: Session waits for it when the client
	// ends the session, the server's Close in any case (Wait).
	s.acks.Add(1)
	s.h.answering.Add(1)
	req := &pawlv1.AckRequest{Ack: m.GetAck()}
	// Its audit record is begun here, on the receiver, so that what is
	// left to do when the outcome is known, on the batches' goroutine,
	// is little.
	a.record = s.guards.beginRecord(s.ctx, pawlv1connect.RolloutServiceAckProcedure, req)
	refuse := func(err error) error {
		if chain != nil {
			chain.Refused(m.GetAck().GetConfigId())
		}
		s.answer(a, req, nil, err)
		return nil
	}
	switch got := m.GetAck(); {
	case got == nil:
		return refuse(InvalidArgument("ack %d carries no ack", m.GetAckId()))
	case got.GetWorkloadIdentity() != s.identity || got.GetBootId() != s.boot:
		return refuse(newError(connect.CodePermissionDenied,
			"the ACK is for %s boot %s; this session speaks for %s boot %s only: send it on that instance's session",
			got.GetWorkloadIdentity(), got.GetBootId(), s.identity, s.boot))
	}
	ack, err := s.checkAck(req)
	if err != nil {
		return refuse(err)
	}
	submit := s.h.submitAck
	if chain != nil {
		submit = chain.SubmitFunc
	}
	// Submitted here, in the order received: the batches judge one
	// instance's ACKs in that order. Nothing waits for the answer: the
	// batches call back once the record is durable, the audit log once
	// the answer's record is, and the next ACK meanwhile joins the same
	// batch (unless the queue is full: then the submit waits for room).
	submit(s.ctx, ack, func(r rollout.AckResult) {
		if r.Err != nil {
			s.answer(a, req, nil, Error(s.h.log, s.spec, r.Err))
			return
		}
		s.answer(a, req, toProtoAck(r.Ack), nil)
	})
	return nil
}

// checkAck checks one ACK as RolloutService.Ack would (authorization,
// text) and reads it off the wire.
func (s *session) checkAck(req *pawlv1.AckRequest) (rollout.Ack, error) {
	if err := checkMessage(s.ctx, pawlv1connect.RolloutServiceAckProcedure, req); err != nil {
		return rollout.Ack{}, err
	}
	return ackFromProto(req.GetAck())
}

// answer has an ACK's answer audited and, once its audit record is
// durable (or could not be written: the answer then says so), sets it
// and wakes the writer. It does not wait; it runs on the goroutine that
// answered the ACK (the receiver's, or the batches'), and the answer is
// set on the audit log's writer.
func (s *session) answer(a *ackAnswer, req *pawlv1.AckRequest, stored *pawlv1.Ack, err error) {
	var resp any
	if err == nil {
		resp = &pawlv1.AckResponse{Ack: stored}
	}
	a.record(resp, err, func(err error) { s.answered(a, req, stored, err) })
}

// answered sets an ACK's answer, audited, and wakes the writer. It must
// not block: it runs on the audit log's writer.
func (s *session) answered(a *ackAnswer, req *pawlv1.AckRequest, stored *pawlv1.Ack, err error) {
	defer s.h.answering.Done()
	defer s.acks.Done()
	countAck(s.lag, req.GetAck(), stored, err)
	if a.span != nil {
		if err != nil {
			a.span.SetStatus(codes.Error, err.Error())
		}
		a.span.End()
	}
	result := &pawlv1.SessionAckResult{AckId: a.id}
	if err != nil {
		result.Error = sessionError(err)
	} else {
		result.Ack = stored
	}
	s.mu.Lock()
	a.result = result
	s.mu.Unlock()
	s.kick()
}

// sessionError is a refusal within a session.
func sessionError(err error) *pawlv1.SessionError {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return &pawlv1.SessionError{Code: ce.Code().String(), Message: ce.Message()}
	}
	return &pawlv1.SessionError{Code: connect.CodeOf(err).String(), Message: err.Error()}
}

// takeAnswers moves the answers due, in order, into msg and frees their
// slots.
func (s *session) takeAnswers(msg *pawlv1.SessionResponse) {
	s.mu.Lock()
	n := 0
	for n < len(s.answers) && s.answers[n].result != nil {
		msg.Acks = append(msg.Acks, s.answers[n].result)
		n++
	}
	s.answers = slices.Delete(s.answers, 0, n)
	s.mu.Unlock()
	for range n {
		<-s.slots
	}
}

// The writer's states (session.wstate).
const (
	writerIdle    int32 = iota // nothing writes; a kick starts a writer
	writerRunning              // a writer (or the handler's start) writes
	writerAgain                // a writer writes, and was kicked since it last looked
	writerStopped              // the session writes no more: kicks do nothing
)

// kick has the session's pending messages sent: it starts a writer if
// none runs, or has the running one look again before it ends. It never
// blocks: the ACK batches and the audit log's writer call it on their
// paths, and the hub, on the commit path, its kickBehind.
func (s *session) kick() { s.startWriter(false) }

// joinHub makes the session's group of watchers in hub, which wakes the
// session's writer (kickBehind) when a change concerns its watches.
func (s *session) joinHub(hub *watch.Hub) { s.group = hub.NewGroupFunc(s.kickBehind) }

// kickBehind is kick for the hub's wake-ups: a writer it starts lets the
// goroutines already waiting for a processor run first (runBehind).
func (s *session) kickBehind() { s.startWriter(true) }

// startWriter is kick; behind says whether a writer it starts runs
// behind the goroutines waiting for a processor.
func (s *session) startWriter(behind bool) {
	for !s.closing.Load() {
		switch s.wstate.Load() {
		case writerIdle:
			if s.wstate.CompareAndSwap(writerIdle, writerRunning) {
				if behind {
					go s.runBehind()
				} else {
					go s.run()
				}
				return
			}
		case writerRunning:
			if s.wstate.CompareAndSwap(writerRunning, writerAgain) {
				return
			}
		default: // writerAgain, writerStopped
			return
		}
	}
}

// run is a writer: it sends what is pending, round after round, until a
// round finds the session not kicked since it began; then it ends. An
// error stops the session's writing (stop).
func (s *session) run() {
	for {
		if err := s.round(); err != nil {
			s.stop(err)
			return
		}
		if s.yield() {
			return
		}
	}
}

// runBehind is run for a writer the hub's wake-up started. It first
// yields its processor: runtime.Gosched puts it on the scheduler's
// global queue, which a busy processor takes from only when its own
// queue is empty (or on one pick in 61), behind what was already waiting
// there. The hub wakes every session a change concerns on the store's
// commit path, just before the commit answers its writers. Started
// there, the writers of 64 sessions queued ahead of every step the
// write's own answer takes next (its handler writing the answer's
// frames, its connection's writer): with 10,000 watches on 64 sessions,
// the put's handler waited 3.9 ms of its 5.1 ms for a processor
// (docs/BENCHMARKS.md). An idle processor still takes the writers at
// once.
func (s *session) runBehind() {
	runtime.Gosched()
	s.run()
}

// yield ends the writer's turn, and reports so, unless a kick came
// since its last round began and the session is not closing (then the
// caller goes on with another round). The caller holds the writer's
// role: the state is writerRunning or writerAgain, and only a kick
// (from running to again) changes it meanwhile.
func (s *session) yield() bool {
	for {
		st := s.wstate.Load()
		if st == writerAgain && !s.closing.Load() {
			s.wstate.Store(writerRunning)
			return false
		}
		if s.wstate.CompareAndSwap(st, writerIdle) {
			s.signalIdle()
			return true
		}
	}
}

// signalIdle makes a pending value on idle, for stopWriting.
func (s *session) signalIdle() {
	select {
	case s.idle <- struct{}{}:
	default:
	}
}

// stop ends the session's writing for err: nil when the session ended
// from the receiving side (its context is done), else the error that
// ends the session, which makes the receiver stop. The caller holds the
// writer's role.
func (s *session) stop(err error) {
	if err = s.ended(err); err != nil {
		s.mu.Lock()
		if s.werr == nil {
			s.werr = err
		}
		s.mu.Unlock()
		s.cancel()
		abortRead(s.ctx)
	}
	s.wstate.Store(writerStopped)
	s.signalIdle()
}

// stopWriting waits until no writer runs, then stops the kicks from
// starting one; it returns the error that ended the writing, if any.
// The handler calls it once it stops receiving.
func (s *session) stopWriting() error {
	s.closing.Store(true)
	for {
		st := s.wstate.Load()
		if st == writerStopped || (st == writerIdle && s.wstate.CompareAndSwap(writerIdle, writerStopped)) {
			break
		}
		if st != writerIdle {
			<-s.idle // a writer runs: it signals when it ends
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.werr
}

// start sends the started message and the first assignments, with the
// releases they name that the client does not hold, when it asked.
func (s *session) start(started *pawlv1.InstanceRecord, after int64, held map[inlineKey]bool) error {
	msg := &pawlv1.SessionResponse{Started: &pawlv1.SessionStarted{Record: started, TakesAckBatches: true}}
	if err := s.startAssignments(msg, after); err != nil {
		return err
	}
	s.inline.addReleases(s.ctx, msg, held)
	return s.send(msg)
}

// round sends whatever is pending (ACK answers, watch requests carried
// out, what the ready watchers have), in as many messages as it takes,
// until nothing is left. The caller holds the writer's role.
func (s *session) round() error {
	if s.ctx.Err() != nil {
		return s.ctx.Err()
	}
	select {
	case <-s.group.Done():
		return Error(s.h.log, s.spec, watch.ErrClosed)
	default:
	}
	msg := s.msg
	for {
		s.takeAnswers(msg)
		more, err := s.fill(msg)
		if err != nil {
			return Error(s.h.log, s.spec, err)
		}
		if len(msg.Acks) > 0 || len(msg.Watches) > 0 || msg.Assignments != nil {
			if err := s.send(msg); err != nil {
				return err
			}
			acks := msg.Acks
			clear(acks)
			msg.Reset()
			msg.Acks = acks[:0]
		}
		if !more {
			return nil
		}
	}
}

// closeWatchers closes the session's watchers, once the writer ended.
func (s *session) closeWatchers() {
	if s.assignW != nil {
		s.assignW.Close()
	}
	for _, sw := range s.watches {
		sw.w.Close()
	}
}

// ended is nil when the session ended from the receiving side (its
// context is done: the client went away), and err otherwise.
func (s *session) ended(err error) error {
	if s.ctx.Err() != nil {
		return nil
	}
	return err
}

// fill puts into msg the watch requests queued (at most sessionCommands:
// the receiver can queue more as fast as they are taken, and the answers
// to ACKs must not wait behind them, nor msg grow without bound) and
// what the ready watchers have pending, up to about
// maxSessionMessageBytes; more says that something is left for the next
// message.
func (s *session) fill(msg *pawlv1.SessionResponse) (more bool, err error) {
	s.share.reset()
	progress := false
	for taken := 0; taken < sessionCommands && len(s.cmds) > 0; taken++ {
		req := <-s.cmds
		if req.GetProgressRequest() != nil {
			// Carried out once below for all of this message's: each
			// asks every open watch, and asking twice is asking once.
			// A watch this message opens after the request is asked
			// too (a progress notification may come at any time).
			progress = true
			continue
		}
		if err := s.command(msg, req); err != nil {
			return false, err
		}
	}
	if progress {
		for _, sw := range s.watches {
			sw.w.RequestProgress()
		}
	}
	// Each marked queued. A watch a request just cancelled is left out:
	// nothing more of it follows its cancellation (its ID may name a new
	// watch already). Nothing closes a watch after this but its own
	// drain, which then counts it drained: what is left behind is open.
	ready := slices.DeleteFunc(s.behind, func(sw *sessionWatch) bool { return sw.closed })
	s.behind = nil
	assignments := false
	for _, w := range s.group.Ready() {
		if w == s.assignW {
			assignments = true
			continue
		}
		if sw := s.byW[w]; sw != nil && !sw.queued {
			sw.queued = true
			ready = append(ready, sw)
		}
	}
	size := 0
	if assignments {
		if err := s.drainAssignments(msg); err != nil {
			return false, err
		}
		size += s.inline.addReleases(s.ctx, msg, nil)
	}
	for i, sw := range ready {
		if size >= maxSessionMessageBytes {
			s.behind = append(s.behind, ready[i:]...)
			break
		}
		n, drained, err := s.drainWatch(msg, sw, maxSessionMessageBytes-size)
		if err != nil {
			return false, err
		}
		size += n
		if drained {
			sw.queued = false
		} else {
			s.behind = append(s.behind, sw)
		}
	}
	return len(s.behind) > 0 || len(s.cmds) > 0, nil
}

// command carries out one request to open or cancel a watch (fill
// carries out the progress requests).
func (s *session) command(msg *pawlv1.SessionResponse, req *pawlv1.SessionRequest) error {
	switch k := req.GetKind().(type) {
	case *pawlv1.SessionRequest_WatchCreate:
		return s.create(msg, k.WatchCreate)
	case *pawlv1.SessionRequest_WatchCancel:
		id := k.WatchCancel.GetWatchId()
		if sw := s.watches[id]; sw != nil {
			s.close(sw)
		}
		// A watch that is not open (it ended, or never opened) is
		// cancelled all the same: nothing more of it follows.
		s.putWatch(msg, &pawlv1.SessionWatchMessage{WatchId: id, Canceled: true})
	}
	return nil
}

// close closes sw, and lets go of its ID unless a new watch holds it.
func (s *session) close(sw *sessionWatch) {
	sw.w.Close()
	sw.closed = true
	if s.watches[sw.id] == sw {
		delete(s.watches, sw.id)
	}
	delete(s.byW, sw.w)
}

// create opens a watch, or says in msg why it cannot; only a failure of
// the server (it shuts down) is returned.
func (s *session) create(msg *pawlv1.SessionResponse, c *pawlv1.SessionWatchCreate) error {
	id, req := c.GetWatchId(), c.GetWatch()
	reply := func(resp *pawlv1.WatchResponse) {
		s.putWatch(msg, &pawlv1.SessionWatchMessage{WatchId: id, Response: resp})
	}
	refuse := func(err error) error {
		s.putWatch(msg, &pawlv1.SessionWatchMessage{WatchId: id, Error: sessionError(err)})
		return nil
	}
	switch {
	case id <= 0:
		return refuse(InvalidArgument("watch_id is %d; it must be positive", id))
	case s.watches[id] != nil:
		return refuse(InvalidArgument("watch_id %d is open already; the IDs of a session's open watches are unique", id))
	case req == nil:
		return refuse(InvalidArgument("watch_create %d carries no watch", id))
	case s.h.maxWatches > 0 && len(s.watches) >= s.h.maxWatches:
		return refuse(LimitExceeded(MaxSessionWatchesFlag, uint64(len(s.watches)), uint64(s.h.maxWatches), "watches",
			"the session holds %d watches, the limit per session (pawld %s %d): cancel one, or ask the operator to raise it",
			len(s.watches), MaxSessionWatchesFlag, s.h.maxWatches))
	}
	if err := store.ValidatePrefix(req.GetPrefix()); err != nil {
		return refuse(Error(s.h.log, s.spec, err))
	}
	if err := checkRevision("start_revision", req.GetStartRevision()); err != nil {
		return refuse(err)
	}
	if err := checkMessage(s.ctx, pawlv1connect.KVServiceWatchProcedure, req); err != nil {
		return refuse(err)
	}
	st, err := s.h.store.Status(s.ctx)
	if err != nil {
		return refuse(Error(s.h.log, s.spec, err))
	}
	if seen := req.GetIncarnation(); seen != "" && st.Incarnation != "" && seen != st.Incarnation {
		// Another history (a restored backup): the client lists and
		// starts over, as on KVService.Watch.
		reply(&pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Started{Started: &pawlv1.WatchStarted{Revision: st.Revision, Incarnation: st.Incarnation}}})
		reply(incarnationChanged(st))
		return nil
	}
	w, err := s.group.Watch(s.ctx, req.GetPrefix(), req.GetStartRevision())
	var compacted *store.CompactedError
	switch {
	case errors.As(err, &compacted):
		reply(compactedMessage(compacted))
		return nil
	case errors.Is(err, watch.ErrClosed):
		return err
	case err != nil:
		return refuse(Error(s.h.log, s.spec, err))
	}
	sw := &sessionWatch{id: id, w: w, started: st.Revision}
	s.watches[id], s.byW[w] = sw, sw
	reply(&pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Started{Started: &pawlv1.WatchStarted{Revision: w.StartedAt(), Incarnation: st.Incarnation}}})
	return nil
}

// drainWatch puts into msg what the watch has pending, while msg has
// room (about room bytes). It returns the bytes added and whether the
// watch has nothing more pending. A compacted watch ends; a failure of
// the server (it shuts down) is returned.
func (s *session) drainWatch(msg *pawlv1.SessionResponse, sw *sessionWatch, room int) (int, bool, error) {
	size := 0
	for size < room {
		b, ok, err := sw.w.Poll(s.ctx)
		var compacted *store.CompactedError
		switch {
		case errors.As(err, &compacted):
			s.putWatch(msg, &pawlv1.SessionWatchMessage{WatchId: sw.id, Response: compactedMessage(compacted)})
			s.close(sw)
			return size, true, nil
		case err != nil:
			return size, false, err
		case !ok:
			return size, true, nil
		}
		size += s.putBatch(msg, sw.id, b)
		if n := len(b.Events); n > 0 && b.Events[n-1].Revision() > sw.started {
			s.lag.FanoutLag(time.Since(b.Events[n-1].Time))
		}
	}
	return size, false, nil
}

// startAssignments starts the session's assignment watcher and puts the
// full set of assignments, at after or later, into msg.
func (s *session) startAssignments(msg *pawlv1.SessionResponse, after int64) error {
	w, err := s.group.Watch(s.ctx, records.ConfigsPrefix, 0)
	if err != nil {
		return Error(s.h.log, s.spec, err)
	}
	s.assignW = w
	// From now: the full set is computed after the watcher started, so
	// no change between the two is missed.
	byConfig, rev, err := s.h.instances.rollouts.AssignmentsAt(s.ctx, s.identity, max(w.StartedAt(), after), nil)
	if err != nil {
		return Error(s.h.log, s.spec, err)
	}
	s.assign.send = func(m *pawlv1.WatchAssignmentsResponse) error { msg.Assignments = m; return nil }
	return s.assign.sendFull(byConfig, rev)
}

// drainAssignments reads every change to the release records pending
// and puts what changed of the instance's assignments into msg.
func (s *session) drainAssignments(msg *pawlv1.SessionResponse) error {
	var configs []string
	var last int64
	for {
		b, ok, err := s.assignW.Poll(s.ctx)
		var compacted *store.CompactedError
		switch {
		case errors.As(err, &compacted):
			s.h.log.Info("session's assignments fell behind the change log's compaction; they start over from the current set",
				"identity", s.identity, "needed", compacted.Requested, "compact_revision", compacted.CompactRevision)
			s.assignW.Close()
			s.assignW = nil
			return s.startAssignments(msg, 0)
		case err != nil:
			return Error(s.h.log, s.spec, err)
		case !ok:
			if last == 0 {
				return nil
			}
			byConfig, rev, err := s.h.instances.rollouts.AssignmentsAt(s.ctx, s.identity, last, configs)
			if err != nil {
				return Error(s.h.log, s.spec, err)
			}
			s.assign.send = func(m *pawlv1.WatchAssignmentsResponse) error { msg.Assignments = m; return nil }
			return s.assign.sendChanges(s.ctx, byConfig, rev)
		case b.Stale != "":
			// This replica cannot follow the store: the instance must not
			// wait on it for assignments that may already exist.
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf(
				"this server cannot follow its store (%s): open the session on another replica with assignments_after_revision %d", b.Stale, b.Progress))
		}
		for _, c := range touchedConfigs(b.Events) {
			if !slices.Contains(configs, c) {
				configs = append(configs, c)
			}
		}
		if n := len(b.Events); n > 0 {
			last = b.Events[n-1].Revision()
		}
	}
}
