package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// streamProtocols are the protocols of protocols that carry a
// bidirectional stream: HTTP/2 only.
var streamProtocols = protocols[1:]

// session is a client's side of a session, for tests.
type session struct {
	t *testing.T
	*connect.BidiStreamForClient[pawlv1.SessionRequest, pawlv1.SessionResponse]
}

// openSession opens a session and sends its hello; it does not read.
func openSession(t *testing.T, ctx context.Context, client *http.Client, url string, hello *pawlv1.SessionHello, opts ...connect.ClientOption) *session {
	t.Helper()
	ss := pawlv1connect.NewSessionServiceClient(client, url, opts...).Session(ctx)
	t.Cleanup(func() { _ = ss.CloseRequest(); _ = ss.CloseResponse() })
	if err := ss.Send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_Hello{Hello: hello}}); err != nil {
		t.Fatalf("send hello: %v", err)
	}
	return &session{t: t, BidiStreamForClient: ss}
}

// start opens a session for instance (boot "b"), registering it, and
// returns it with its started message (the registration and the first
// assignments).
func start(t *testing.T, ctx context.Context, client *http.Client, url, id string, opts ...connect.ClientOption) (*session, *pawlv1.SessionResponse) {
	t.Helper()
	s := openSession(t, ctx, client, url, &pawlv1.SessionHello{Instance: instanceOf(id)}, opts...)
	first := s.recv()
	if first.GetStarted() == nil || !first.GetAssignments().GetFull() {
		t.Fatalf("first message: %v", first)
	}
	return s, first
}

func instanceOf(id string) *pawlv1.Instance {
	return &pawlv1.Instance{WorkloadIdentity: id, BootId: "b", Zone: "zone-a", Role: "worker", TrafficWeight: 1, AppVersion: "1.0.0",
		Labels: map[string]string{"canary": "true"}}
}

func (s *session) recv() *pawlv1.SessionResponse {
	s.t.Helper()
	m, err := s.Receive()
	if err != nil {
		s.t.Fatalf("session ended: %v", err)
	}
	return m
}

func (s *session) send(req *pawlv1.SessionRequest) {
	s.t.Helper()
	if err := s.Send(req); err != nil {
		s.t.Fatalf("send: %v", err)
	}
}

func (s *session) watch(id int64, prefix string, start int64) {
	s.t.Helper()
	s.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_WatchCreate{WatchCreate: &pawlv1.SessionWatchCreate{
		WatchId: id, Watch: &pawlv1.WatchRequest{Prefix: prefix, StartRevision: start}}}})
}

func (s *session) ack(id uint64, a *pawlv1.Ack) {
	s.t.Helper()
	s.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_Ack{Ack: &pawlv1.SessionAck{AckId: id, Ack: a}}})
}

// endsWith reads until the session ends and returns its error's code.
func (s *session) endsWith() connect.Code {
	s.t.Helper()
	for {
		_, err := s.Receive()
		// A clean end: io.EOF, which a Connect client reports as the end
		// message it read.
		if errors.Is(err, io.EOF) || (connect.CodeOf(err) == connect.CodeUnknown && strings.HasSuffix(err.Error(), ": EOF")) {
			return 0
		} else if err != nil {
			return connect.CodeOf(err)
		}
	}
}

// watchLog collects, per watch ID, what a session's watches said.
type watchLog struct {
	events   map[int64][]string // "key=value@rev" per watch
	started  map[int64]*pawlv1.WatchStarted
	other    map[int64][]string // "compacted", "canceled", "error:<code>", "progress"
	messages int
}

func newWatchLog() *watchLog {
	return &watchLog{events: map[int64][]string{}, started: map[int64]*pawlv1.WatchStarted{}, other: map[int64][]string{}}
}

func (l *watchLog) add(m *pawlv1.SessionResponse) {
	l.messages++
	for _, wm := range m.GetWatches() {
		id := wm.GetWatchId()
		switch r := wm.GetResponse(); {
		case wm.GetCanceled():
			l.other[id] = append(l.other[id], "canceled")
		case wm.GetError() != nil:
			l.other[id] = append(l.other[id], "error:"+wm.GetError().GetCode())
		case r.GetStarted() != nil:
			l.started[id] = r.GetStarted()
		case r.GetCompacted() != nil:
			l.other[id] = append(l.other[id], "compacted")
		case r.GetEvents() != nil:
			for _, ev := range r.GetEvents().GetEvents() {
				l.events[id] = append(l.events[id], fmt.Sprintf("%s=%s@%d", ev.GetKv().GetKey(), ev.GetKv().GetValue(), ev.GetKv().GetModRevision()))
			}
		}
	}
}

// until reads the session into l until done says so.
func (s *session) until(l *watchLog, done func() bool) {
	s.t.Helper()
	for !done() {
		l.add(s.recv())
	}
}

// TestSessionRegistersWatchesAndAcks: over gRPC and Connect, a session
// registers its instance, sends the full assignments first, carries
// watches of several prefixes (one change under both in one message),
// answers pipelined ACKs in order (a malformed one in the middle answered
// with its error, the session going on), refuses an ACK for another
// identity, and sends the assignments' delta when a release reaches the
// instance.
func TestSessionRegistersWatchesAndAcks(t *testing.T) {
	for _, proto := range streamProtocols {
		t.Run(proto.name, func(t *testing.T) {
			srv := testserver.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client := testserver.HTTPClient(t)
			c := newCanaryRollout(t, ctx, srv, connect.WithGRPC())
			kv := pawlv1connect.NewKVServiceClient(client, srv.URL, proto.opts...)

			register(t, c.is, "main-1", "b", "zone-a", nil) // the release's "everyone" stage
			s, first := start(t, ctx, client, srv.URL, "canary-1", proto.opts...)
			rec := first.GetStarted().GetRecord()
			if rec.GetMembershipEpoch() == 0 || !rec.GetLive() || len(first.GetAssignments().GetAssignments()) != 0 {
				t.Fatalf("started: %v", first)
			}
			if got := epochOf(t, c.is, "canary-1"); got != rec.GetMembershipEpoch() {
				t.Fatalf("registered at epoch %d, the session says %d", got, rec.GetMembershipEpoch())
			}

			s.watch(1, "/app/", 0)
			s.watch(2, "/app/db/", 0)
			log := newWatchLog()
			s.until(log, func() bool { return log.started[1] != nil && log.started[2] != nil })
			put, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/app/db/url", Value: []byte("pg")}))
			if err != nil {
				t.Fatal(err)
			}
			m := s.recv()
			log.add(m)
			want := fmt.Sprintf("/app/db/url=pg@%d", put.Msg.GetRevision())
			if len(m.GetWatches()) != 2 || strings.Join(log.events[1], ",") != want || strings.Join(log.events[2], ",") != want {
				t.Fatalf("one change under two watches: one message with both, got %v", m)
			}

			rel := c.create(50) // reaches the canary stage, which the instance is in: a delta
			var delta *pawlv1.WatchAssignmentsResponse
			for delta == nil {
				m := s.recv()
				log.add(m)
				delta = m.GetAssignments()
			}
			if delta.GetFull() || render(delta) != "routing@1:canary " {
				t.Fatalf("assignments after the release: %v", delta)
			}
			ack := func(gen int64) *pawlv1.Ack {
				return &pawlv1.Ack{ConfigId: "routing", Generation: gen, WorkloadIdentity: "canary-1", BootId: "b", ApplySequence: gen,
					MembershipEpoch: rec.GetMembershipEpoch(), ContentDigest: rel.GetContentDigest(), ValidatorDigest: c.digest,
					State: pawlv1.InstanceState_INSTANCE_STATE_DOWNLOADED}
			}
			other := ack(1)
			other.WorkloadIdentity = "main-1"
			bad := ack(1)
			bad.RejectCode = 999
			s.ack(10, ack(1))
			s.ack(11, bad)
			s.ack(12, other)
			s.ack(13, ack(1))
			var results []*pawlv1.SessionAckResult
			for len(results) < 4 {
				results = append(results, s.recv().GetAcks()...)
			}
			for i, r := range results {
				if r.GetAckId() != uint64(10+i) {
					t.Fatalf("answers out of order: %v", results)
				}
			}
			if results[0].GetAck().GetGeneration() != 1 || results[0].GetError() != nil ||
				results[1].GetError().GetCode() != "invalid_argument" || results[1].GetAck() != nil ||
				results[2].GetError().GetCode() != "permission_denied" ||
				results[3].GetAck() == nil {
				t.Fatalf("answers: %v", results)
			}
		})
	}
}

// TestSessionRefusesWhatIsNotAHello: the first message must be a hello;
// a hello resuming a registration that is not current is refused with
// FailedPrecondition.
func TestSessionRefusesWhatIsNotAHello(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := testserver.HTTPClient(t)
	ss := pawlv1connect.NewSessionServiceClient(client, srv.URL, connect.WithGRPC()).Session(ctx)
	defer func() { _ = ss.CloseResponse() }()
	if err := ss.Send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_ProgressRequest{ProgressRequest: &pawlv1.SessionProgressRequest{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Receive(); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a first message that is not a hello: %v", err)
	}

	s, first := start(t, ctx, client, srv.URL, "pay-1")
	epoch := first.GetStarted().GetRecord().GetMembershipEpoch()
	_ = s.CloseRequest()
	if code := s.endsWith(); code != 0 {
		t.Fatalf("a session the client closed ends with %v", code)
	}
	// Resume at the current epoch: the same registration.
	r := openSession(t, ctx, client, srv.URL, &pawlv1.SessionHello{Instance: instanceOf("pay-1"), MembershipEpoch: epoch})
	if got := r.recv().GetStarted().GetRecord().GetMembershipEpoch(); got != epoch {
		t.Fatalf("resumed at epoch %d, got %d", epoch, got)
	}
	// Registered again (a session with epoch 0): the old epoch is stale,
	// and so is a resume with another boot.
	again := openSession(t, ctx, client, srv.URL, &pawlv1.SessionHello{Instance: instanceOf("pay-1")})
	if got := again.recv().GetStarted().GetRecord().GetMembershipEpoch(); got <= epoch {
		t.Fatalf("registered again at epoch %d after %d", got, epoch)
	}
	stale := openSession(t, ctx, client, srv.URL, &pawlv1.SessionHello{Instance: instanceOf("pay-1"), MembershipEpoch: epoch})
	if code := stale.endsWith(); code != connect.CodeFailedPrecondition {
		t.Fatalf("a stale resume: %v", code)
	}
	other := instanceOf("pay-1")
	other.BootId = "b2"
	if code := openSession(t, ctx, client, srv.URL, &pawlv1.SessionHello{Instance: other, MembershipEpoch: epoch}).endsWith(); code != connect.CodeFailedPrecondition {
		t.Fatalf("a resume by another boot: %v", code)
	}
}
