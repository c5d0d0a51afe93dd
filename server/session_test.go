package server_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/goroutines"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/sdk/auditchain"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/server/internal/api"
	"github.com/pawlcfg/pawl/server/internal/audit"
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
	// Go's HTTP/2 client notices the end of ctx only once the request's
	// body is done: closing it when ctx ends ends a Receive that waits, so
	// that a test fails at its deadline rather than at the package's.
	// (Closing the request's pipe while a Send writes to it is safe. The
	// server may then see the end of the requests, EOF, before the
	// stream's reset: a session ended either way.)
	stop := context.AfterFunc(ctx, func() { _ = ss.CloseRequest() })
	t.Cleanup(func() { stop(); _ = ss.CloseRequest(); _ = ss.CloseResponse() })
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

// watchLog collects, per watch ID, what a session's watches said. A
// watch message shared with other watches (shared_with) is each one's, as
// a client hands it out.
type watchLog struct {
	events   map[int64][]string // "key=value@rev" per watch
	batches  map[int64][]string // per watch, the revisions of each events message, "rev,rev"
	started  map[int64]*pawlv1.WatchStarted
	other    map[int64][]string // "compacted", "canceled", "error:<code>", "progress"
	messages int
	// shared counts the watch messages for more than one watch; wrong
	// says what was wrong with one (not events, or a watch named twice).
	shared int
	wrong  []string
}

func newWatchLog() *watchLog {
	return &watchLog{events: map[int64][]string{}, batches: map[int64][]string{}, started: map[int64]*pawlv1.WatchStarted{}, other: map[int64][]string{}}
}

func (l *watchLog) add(m *pawlv1.SessionResponse) {
	l.messages++
	for _, wm := range m.GetWatches() {
		ids := append([]int64{wm.GetWatchId()}, wm.GetSharedWith()...)
		if len(ids) > 1 {
			l.shared++
			if wm.GetResponse().GetEvents() == nil {
				l.wrong = append(l.wrong, fmt.Sprintf("shared, not events: %v", wm))
			}
		}
		seen := map[int64]bool{}
		for _, id := range ids {
			if seen[id] {
				l.wrong = append(l.wrong, fmt.Sprintf("watch %d twice in one message: %v", id, ids))
			}
			seen[id] = true
			l.addFor(id, wm)
		}
	}
}

func (l *watchLog) addFor(id int64, wm *pawlv1.SessionWatchMessage) {
	switch r := wm.GetResponse(); {
	case wm.GetCanceled():
		l.other[id] = append(l.other[id], "canceled")
	case wm.GetError() != nil:
		l.other[id] = append(l.other[id], "error:"+wm.GetError().GetCode())
	case r.GetStarted() != nil:
		l.started[id] = r.GetStarted()
	case r.GetCompacted() != nil:
		l.other[id] = append(l.other[id], "compacted")
	case r.GetProgress() != nil:
		l.other[id] = append(l.other[id], fmt.Sprintf("progress@%d", r.GetProgress().GetRevision()))
	case r.GetEvents() != nil:
		var revs []string
		for _, ev := range r.GetEvents().GetEvents() {
			value := string(ev.GetKv().GetValue())
			if len(value) > 16 {
				value = "..."
			}
			l.events[id] = append(l.events[id], fmt.Sprintf("%s=%s@%d", ev.GetKv().GetKey(), value, ev.GetKv().GetModRevision()))
			revs = append(revs, fmt.Sprint(ev.GetKv().GetModRevision()))
		}
		l.batches[id] = append(l.batches[id], strings.Join(revs, ","))
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
// answers pipelined ACKs in order (malformed ones, a bad field or bad
// text, answered with their error, the session going on), refuses an ACK for another
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
			text := ack(1)
			text.AppArtifact = "app\u202eevil" // a bidirectional override: the text check refuses it
			s.ack(10, ack(1))
			s.ack(11, bad)
			s.ack(12, other)
			s.ack(13, ack(1))
			s.ack(14, text)
			var results []*pawlv1.SessionAckResult
			for len(results) < 5 {
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
				results[3].GetAck() == nil || results[4].GetError().GetCode() != "invalid_argument" {
				t.Fatalf("answers: %v", results)
			}
			// Judged in the order sent, as answered: the first report is
			// counted, the same report after it is the duplicate.
			if !results[0].GetAck().GetCounted() || results[3].GetAck().GetCounted() ||
				!strings.HasPrefix(results[3].GetAck().GetNotCountedReason(), "duplicate:") {
				t.Fatalf("the same report twice, pipelined: %v then %v", results[0].GetAck(), results[3].GetAck())
			}
			// The registration and every ACK, stored or refused, has its
			// audit record, as the unary calls do.
			byProcedure := map[string][]string{}
			for _, rec := range auditRecords(t, ctx, pawlv1connect.NewAuditServiceClient(client, srv.URL), 100) {
				if rec.Subject.Identity == "canary-1" {
					byProcedure[rec.Procedure] = append(byProcedure[rec.Procedure], rec.Outcome)
				}
			}
			if len(byProcedure[pawlv1connect.InstanceServiceRegisterProcedure]) != 1 || len(byProcedure[pawlv1connect.RolloutServiceAckProcedure]) != 4 {
				t.Fatalf("audit records of canary-1: %v", byProcedure)
			}
		})
	}
}

// TestSessionTakesSeveralACKsInOneMessage: a server says in SessionStarted
// that it takes ACK batches; a batch is judged, stored and answered as its
// ACKs sent one after another (each with its own answer, in order, a
// state after a later one out of order: they are judged in the batch's
// order); an empty batch does nothing; an ACK that was not recorded
// (refused by the session's checks, or by the rollout) leaves the later
// ones of its config in the message unjudged (ABORTED); a message over
// the bound ends the session; and pawl_session_acks_per_message counts a
// batch as one message of its ACKs.
func TestSessionTakesSeveralACKsInOneMessage(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := testserver.HTTPClient(t)
	c := newCanaryRollout(t, ctx, srv, connect.WithGRPC())
	register(t, c.is, "main-1", "b", "zone-a", nil) // the release's "everyone" stage
	s, first := start(t, ctx, client, srv.URL, "canary-1")
	if !first.GetStarted().GetTakesAckBatches() {
		t.Fatalf("the server does not say it takes ACK batches: %v", first.GetStarted())
	}
	rec := first.GetStarted().GetRecord()
	rel := c.create(50)
	for m := s.recv(); m.GetAssignments() == nil; m = s.recv() {
	}
	ack := func(state pawlv1.InstanceState) *pawlv1.Ack {
		return &pawlv1.Ack{ConfigId: "routing", Generation: rel.GetGeneration(), WorkloadIdentity: "canary-1", BootId: "b", ApplySequence: 1,
			MembershipEpoch: rec.GetMembershipEpoch(), ContentDigest: rel.GetContentDigest(), ValidatorDigest: c.digest, State: state}
	}
	bad := ack(pawlv1.InstanceState_INSTANCE_STATE_VALIDATED)
	bad.RejectCode = 999
	batch := func(first uint64, acks ...*pawlv1.Ack) *pawlv1.SessionRequest {
		b := &pawlv1.SessionAckBatch{}
		for i, a := range acks {
			b.Acks = append(b.Acks, &pawlv1.SessionAck{AckId: first + uint64(i), Ack: a})
		}
		return &pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_Acks{Acks: b}}
	}
	before := scrapeMetrics(t, srv)
	s.send(batch(20,
		ack(pawlv1.InstanceState_INSTANCE_STATE_DOWNLOADED), ack(pawlv1.InstanceState_INSTANCE_STATE_VALIDATED),
		ack(pawlv1.InstanceState_INSTANCE_STATE_DOWNLOADED), bad))
	s.send(batch(0))
	s.ack(24, ack(pawlv1.InstanceState_INSTANCE_STATE_STAGED))
	// A report that is not recorded (its release does not exist) leaves
	// the later one of its config in the message unjudged, and nothing of
	// it stored, so that the instance sends both again in order; another
	// config's is judged.
	unknown, otherConfig := ack(pawlv1.InstanceState_INSTANCE_STATE_APPLIED), ack(pawlv1.InstanceState_INSTANCE_STATE_APPLIED)
	unknown.Generation, otherConfig.ConfigId = 99, "no-such-config"
	s.send(batch(25, unknown, ack(pawlv1.InstanceState_INSTANCE_STATE_APPLIED), otherConfig))
	s.ack(28, ack(pawlv1.InstanceState_INSTANCE_STATE_APPLIED))
	// So does one the session refuses before judging it.
	s.send(batch(29, bad, ack(pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)))
	var results []*pawlv1.SessionAckResult
	for len(results) < 11 {
		results = append(results, s.recv().GetAcks()...)
	}
	var got []string
	for i, r := range results {
		if r.GetAckId() != uint64(20+i) {
			t.Fatalf("answers out of order: %v", results)
		}
		switch {
		case r.GetError() != nil:
			got = append(got, "refused "+r.GetError().GetCode())
		case r.GetAck().GetCounted():
			got = append(got, r.GetAck().GetState().String()+" counted")
		default:
			got = append(got, r.GetAck().GetState().String()+" "+strings.SplitN(r.GetAck().GetNotCountedReason(), ":", 2)[0])
		}
	}
	want := "INSTANCE_STATE_DOWNLOADED counted; INSTANCE_STATE_VALIDATED counted; INSTANCE_STATE_DOWNLOADED out of order; refused invalid_argument; INSTANCE_STATE_STAGED counted; " +
		"refused not_found; refused aborted; refused not_found; INSTANCE_STATE_APPLIED counted; refused invalid_argument; refused aborted"
	if strings.Join(got, "; ") != want {
		t.Fatalf("answers:\n got %s\nwant %s", strings.Join(got, "; "), want)
	}
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL)
	status, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: rel.GetGeneration()}))
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, a := range status.Msg.GetAcks() {
		stored = append(stored, a.GetState().String())
	}
	slices.Sort(stored)
	if strings.Join(stored, ",") != "INSTANCE_STATE_APPLIED,INSTANCE_STATE_DOWNLOADED,INSTANCE_STATE_DOWNLOADED,INSTANCE_STATE_STAGED,INSTANCE_STATE_VALIDATED" {
		t.Fatalf("stored: %v", stored)
	}
	moved(t, before, scrapeMetrics(t, srv), map[string]float64{
		series("pawl_session_acks_per_message_count"): 5,
		series("pawl_session_acks_per_message_sum"):   11,
	})
	over := make([]*pawlv1.Ack, api.MaxAcksPerMessage+1)
	for i := range over {
		over[i] = ack(pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
	}
	s.send(batch(100, over...))
	if code := s.endsWith(); code != connect.CodeInvalidArgument {
		t.Fatalf("a message of %d ACKs ended the session with %v, want invalid_argument", len(over), code)
	}
	moved(t, before, scrapeMetrics(t, srv), map[string]float64{series("pawl_acks_total", "state=HEALTHY_ACKED", "outcome=counted"): 0})
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

// TestSessionAuthorizesEveryRequest: with an auth file, an instance
// principal opens a session only for an identity it may speak for,
// resumes only a registration it made, ACKs only as its session's
// identity, and watches only prefixes it may read, seeing only keys it
// may read; a refused ACK or watch is answered in the session, which goes
// on.
func TestSessionAuthorizesEveryRequest(t *testing.T) {
	f := &authFixture{t: t, ctx: context.Background(), tokens: map[string]string{}, hashes: map[string]string{}}
	body := f.authYAML("admin", "other-instance:instance")
	svc, svcHash := testserver.NewToken(t)
	body += fmt.Sprintf("  - principal: svc\n    hash: %s\n    grants: [{role: instance, identities: [\"app-*\"]}, {role: reader, prefixes: [\"/app/\"]}]\n", svcHash)
	f.path = testserver.WriteAuthFile(t, body)
	f.srv = testserver.Start(t, server.WithAuthFile(f.path))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svcClient := testserver.BearerClient(t, svc)
	admin := f.as("admin")

	for _, proto := range streamProtocols {
		t.Run(proto.name, func(t *testing.T) {
			if code := openSession(t, ctx, svcClient, f.srv.URL, &pawlv1.SessionHello{Instance: instanceOf("pay-1")}, proto.opts...).endsWith(); code != connect.CodePermissionDenied {
				t.Fatalf("a session for an identity the principal may not speak for: %v", code)
			}
			id := "app-" + proto.name
			s, first := start(t, ctx, svcClient, f.srv.URL, id, proto.opts...)
			epoch := first.GetStarted().GetRecord().GetMembershipEpoch()
			other := openSession(t, ctx, testserver.BearerClient(t, f.tokens["other-instance"]), f.srv.URL,
				&pawlv1.SessionHello{Instance: instanceOf(id), MembershipEpoch: epoch}, proto.opts...)
			if code := other.endsWith(); code != connect.CodePermissionDenied {
				t.Fatalf("another principal resuming the registration: %v", code)
			}
			takeover := openSession(t, ctx, testserver.BearerClient(t, f.tokens["other-instance"]), f.srv.URL,
				&pawlv1.SessionHello{Instance: instanceOf(id)}, proto.opts...)
			if code := takeover.endsWith(); code != connect.CodePermissionDenied {
				t.Fatalf("another principal registering the live identity: %v", code)
			}

			s.watch(1, "/", 0)        // some of it readable: narrowed
			s.watch(2, "/secret/", 0) // none of it readable: refused
			log := newWatchLog()
			s.until(log, func() bool { return log.started[1] != nil && (len(log.other[2]) > 0 || log.started[2] != nil) })
			if got := log.other[2]; len(got) != 1 || got[0] != "error:permission_denied" || log.started[2] != nil {
				t.Fatalf("a watch of an unreadable prefix: %v", got)
			}
			for _, key := range []string{"/secret/k", "/app/k"} {
				if _, err := admin.kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte("v")})); err != nil {
					t.Fatal(err)
				}
			}
			s.until(log, func() bool { return len(log.events[1]) > 0 })
			for _, ev := range log.events[1] {
				if strings.HasPrefix(ev, "/secret/") {
					t.Fatalf("the session saw a key its principal may not read: %v", log.events[1])
				}
			}

			other2 := "app-x" + proto.name
			if _, err := f.as("admin").register(other2, "b"); err != nil {
				t.Fatal(err)
			}
			ack := &pawlv1.Ack{ConfigId: "app", Generation: 1, WorkloadIdentity: other2, BootId: "b", MembershipEpoch: epoch,
				State: pawlv1.InstanceState_INSTANCE_STATE_DOWNLOADED}
			s.ack(1, ack)
			var results []*pawlv1.SessionAckResult
			for len(results) == 0 {
				results = s.recv().GetAcks()
			}
			if results[0].GetError().GetCode() != "permission_denied" {
				t.Fatalf("an ACK for another identity: %v", results)
			}
			// The session goes on: a watch of its own prefix still opens.
			s.watch(3, "/app/", 0)
			s.until(log, func() bool { return log.started[3] != nil })
		})
	}
}

// TestSessionHoldsTheLease: an instance whose session is open stays live
// with no heartbeat, long past its lease; when the session ends its lease
// runs one full term and then lapses.
func TestSessionHoldsTheLease(t *testing.T) {
	clock := testclock.New(time.Now())
	srv := testserver.Start(t, server.WithClock(clock.Now), server.WithInstanceLease(30*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	live := soleLive(t, ctx, is)
	sctx, closeSession := context.WithCancel(ctx)
	s, _ := start(t, sctx, client, srv.URL, "pay-1", connect.WithGRPC())
	clock.Advance(10 * time.Minute)
	if !live() {
		t.Fatal("the instance holding its session lost its lease")
	}
	closeSession()
	_ = s.CloseResponse()
	leaseRunsOneTerm(t, srv, clock, live)
}

// TestSessionWatchesCancelCompactAndLimits: a cancelled watch says so
// and nothing more of it follows while another watch of the same prefix
// goes on; a watch from a compacted revision gets its notice and ends
// alone; IDs must be positive and unique among open watches; past
// --max-session-watches a watch is refused with resource_exhausted and
// the session goes on.
func TestSessionWatchesCancelCompactAndLimits(t *testing.T) {
	srv := testserver.Start(t, server.WithRetention(5, 0), server.WithMaxSessionWatches(3))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := testserver.HTTPClient(t)
	kv := newKV(t, srv)
	for i := range 20 {
		put(t, kv, fmt.Sprintf("/c/%d", i%3), fmt.Sprint(i))
	}
	if _, err := srv.Server.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ := start(t, ctx, client, srv.URL, "pay-1", connect.WithGRPC())
	log := newWatchLog()
	s.watch(1, "/c/", 0)
	s.watch(2, "/c/", 0)
	s.watch(3, "/c/", 3) // compacted
	s.watch(1, "/d/", 0) // ID open already
	s.watch(0, "/d/", 0)
	s.until(log, func() bool { return len(log.other[3]) > 0 && len(log.other[1]) > 0 && len(log.other[0]) > 0 })
	if log.other[3][0] != "compacted" || log.other[1][0] != "error:invalid_argument" || log.other[0][0] != "error:invalid_argument" {
		t.Fatalf("compacted and refused watches: %v", log.other)
	}
	s.watch(4, "/d/", 0)
	s.watch(5, "/d/", 0) // over the limit of 3 (1, 2, 4 are open)
	s.until(log, func() bool { return log.started[4] != nil && len(log.other[5]) > 0 })
	if log.other[5][0] != "error:resource_exhausted" {
		t.Fatalf("a watch over the limit: %v", log.other[5])
	}
	s.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_WatchCancel{WatchCancel: &pawlv1.SessionWatchCancel{WatchId: 2}}})
	s.until(log, func() bool { return len(log.other[2]) > 0 })
	if log.other[2][0] != "canceled" {
		t.Fatalf("cancel: %v", log.other[2])
	}
	rev := put(t, kv, "/c/after", "x")
	s.until(log, func() bool { return len(log.events[1]) > 0 })
	if len(log.events[2]) != 0 || len(log.other[2]) != 1 {
		t.Fatalf("a cancelled watch went on: %v %v", log.events[2], log.other[2])
	}
	if log.events[1][0] != fmt.Sprintf("/c/after=x@%d", rev) {
		t.Fatalf("watch 1 after the cancel of 2: %v", log.events[1])
	}
	// The slot of the cancelled watch is free again.
	s.watch(6, "/d/", 0)
	s.until(log, func() bool { return log.started[6] != nil || len(log.other[6]) > 0 })
	if log.started[6] == nil {
		t.Fatalf("a watch after a cancel freed a slot: %v", log.other[6])
	}
}

// overflowUnread puts 16 MiB of changes under prefix (64 of 256 KiB, under
// eight keys) and returns their revisions: for a session watching prefix
// whose client reads nothing, more than the stream's flow-control window
// (4 MiB, Go's HTTP/2 client) and what the session and HTTP/2 buffer, so
// that its writer ends up waiting in HTTP/2's write.
func overflowUnread(t *testing.T, ctx context.Context, kv pawlv1connect.KVServiceClient, prefix string) []int64 {
	t.Helper()
	value := make([]byte, 256<<10) // random: compression does not shrink it
	_, _ = rand.Read(value)
	var revs []int64
	for i := range 64 {
		resp, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("%s%d", prefix, i%8), Value: value}))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, resp.Msg.GetRevision())
	}
	return revs
}

// TestASessionWatchLeftBehindACompactionEndsCompacted: a watch whose
// session's client stopped reading falls out of the watch ring, and the
// change log is compacted past it meanwhile. When the client reads
// again, the watch's events come in order and without a gap up to where
// the log still held them, then its compacted notice, and nothing more
// of it; the session and its other watch go on.
func TestASessionWatchLeftBehindACompactionEndsCompacted(t *testing.T) {
	srv := testserver.Start(t, server.WithRetention(5, 0), server.WithWatchRing(8))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv := newKV(t, srv)
	s, _ := start(t, ctx, testserver.HTTPClient(t), srv.URL, "pay-1", connect.WithGRPC())
	s.watch(1, "/c/", 0)
	s.watch(2, "/d/", 0)
	log := newWatchLog()
	s.until(log, func() bool { return log.started[1] != nil && log.started[2] != nil })
	// The client reads nothing now: the session's writer waits, with
	// watch 1 behind.
	revs := overflowUnread(t, ctx, kv, "/c/")
	for i := range 20 { // past the ring of 8
		revs = append(revs, put(t, kv, fmt.Sprintf("/c/small/%d", i%4), "x"))
	}
	compactedAt, err := srv.Server.ApplyRetention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if compactedAt <= revs[0] {
		t.Fatalf("compacted at %d: not past the first change under the watch (%d)", compactedAt, revs[0])
	}
	d := put(t, kv, "/d/after", "y")
	s.until(log, func() bool { return len(log.other[1]) > 0 && len(log.events[2]) > 0 })
	if got := log.other[1]; len(got) != 1 || got[0] != "compacted" {
		t.Fatalf("watch 1 after falling behind the compaction: %v; want compacted", got)
	}
	got := log.events[1]
	if len(got) == 0 || len(got) >= len(revs) {
		t.Fatalf("watch 1 got %d of the %d changes before its compacted notice: the test did not leave it behind the compaction", len(got), len(revs))
	}
	for i, ev := range got {
		if !strings.HasSuffix(ev, fmt.Sprintf("@%d", revs[i])) {
			t.Fatalf("watch 1: event %d is %s, want revision %d (a gap or a duplicate)", i, ev, revs[i])
		}
	}
	if log.events[2][0] != fmt.Sprintf("/d/after=y@%d", d) {
		t.Fatalf("watch 2: %v", log.events[2])
	}
	// Nothing more of watch 1: a change under /c/ reaches no one, and the
	// session still answers (a change under /d/ after it comes).
	put(t, kv, "/c/later", "x")
	d2 := put(t, kv, "/d/later", "y")
	s.until(log, func() bool { return len(log.events[2]) > 1 })
	if len(log.events[1]) != len(got) || len(log.other[1]) != 1 || log.events[2][1] != fmt.Sprintf("/d/later=y@%d", d2) {
		t.Fatalf("after the compacted notice: watch 1 %d events, %v; watch 2 %v", len(log.events[1])-len(got), log.other[1], log.events[2])
	}
}

// TestSessionWatchResumesExactlyOnce: a session cut in the middle of a
// stream of changes; a new session resuming its two watches of one
// prefix, each from the revision after the last event it got, sees every
// later change once, in order, on each, with and without shared events.
func TestSessionWatchResumesExactlyOnce(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			srv := testserver.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			kv := newKV(t, srv)
			sctx, cut := context.WithCancel(ctx)
			s := openSession(t, sctx, testserver.HTTPClient(t), srv.URL, &pawlv1.SessionHello{Instance: instanceOf("pay-1"), SharedEvents: shared})
			first := s.recv()
			epoch := first.GetStarted().GetRecord().GetMembershipEpoch()
			ids := []int64{7, 8}
			for _, id := range ids {
				s.watch(id, "/r/", 0)
			}
			log := newWatchLog()
			s.until(log, func() bool { return log.started[7] != nil && log.started[8] != nil })
			var revs []int64
			for i := range 40 {
				revs = append(revs, put(t, kv, fmt.Sprintf("/r/%d", i%5), fmt.Sprint(i)))
				if i < 9 {
					// Not the watches': skipped. From the tenth change
					// on, the revision after each change is the next
					// change under /r/: the watches resume (from at
					// least their tenth) at a revision they follow, so
					// that starting one late loses an event.
					put(t, kv, "/other/k", "x")
				}
			}
			s.until(log, func() bool { return len(log.events[7]) >= 10 && len(log.events[8]) >= 10 })
			cut()
			var rest []int64
			for i := range 20 {
				rest = append(rest, put(t, kv, fmt.Sprintf("/r/%d", i%5), fmt.Sprint(40+i)))
			}
			r := openSession(t, ctx, testserver.HTTPClient(t), srv.URL, &pawlv1.SessionHello{Instance: instanceOf("pay-1"), MembershipEpoch: epoch, SharedEvents: shared})
			got := map[int64][]string{}
			for _, id := range ids {
				got[id] = slices.Clone(log.events[id])
				r.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_WatchCreate{WatchCreate: &pawlv1.SessionWatchCreate{
					WatchId: id, Watch: &pawlv1.WatchRequest{Prefix: "/r/", StartRevision: revs[len(got[id])-1] + 1}}}})
			}
			log2 := newWatchLog()
			wantRevs := append(slices.Clone(revs), rest...)
			// Until each has the last change (not a count: a watch that
			// lost one would wait for it until the deadline).
			last := fmt.Sprintf("@%d", wantRevs[len(wantRevs)-1])
			r.until(log2, func() bool {
				for _, id := range ids {
					if n := len(log2.events[id]); n == 0 || !strings.HasSuffix(log2.events[id][n-1], last) {
						return false
					}
				}
				return true
			})
			for _, id := range ids {
				all := append(got[id], log2.events[id]...)
				if len(all) != len(wantRevs) {
					t.Fatalf("watch %d got %d events, want %d", id, len(all), len(wantRevs))
				}
				for i, ev := range all {
					if !strings.HasSuffix(ev, fmt.Sprintf("@%d", wantRevs[i])) {
						t.Fatalf("watch %d: event %d is %s, want revision %d (a gap or a duplicate)", id, i, ev, wantRevs[i])
					}
				}
			}
			if shared && log.shared+log2.shared == 0 {
				t.Error("nothing was shared between the two watches of one prefix")
			}
		})
	}
}

// TestASlowSessionDelaysNobody: one session reads nothing while 2,500
// changes of 4 KiB are made (far more than the watch ring holds, and than
// HTTP/2 flow control lets the server send unread: its writer blocks);
// another session on its own connection gets every one of them meanwhile,
// and so does each of its two watches; the slow session then reads every
// change once, in order, from the change log and the ring.
func TestASlowSessionDelaysNobody(t *testing.T) {
	// No progress ticks: nothing but the writer's own bookkeeping brings
	// the slow session the rest of what it has not been sent.
	srv := testserver.Start(t, server.WithWatchRing(64), server.WithProgressInterval(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // 2,500 puts under -race on a shared machine
	defer cancel()
	kv := newKV(t, srv)
	slow, _ := start(t, ctx, testserver.HTTPClient(t), srv.URL, "slow-1", connect.WithGRPC())
	fast, _ := start(t, ctx, testserver.HTTPClient(t), srv.URL, "fast-1")
	slow.watch(1, "/s/", 0)
	slow.watch(2, "/s/a/", 0)
	fast.watch(1, "/s/", 0)
	fast.watch(2, "/s/a/", 0)
	slowLog, fastLog := newWatchLog(), newWatchLog()
	slow.until(slowLog, func() bool { return slowLog.started[1] != nil && slowLog.started[2] != nil })
	fast.until(fastLog, func() bool { return fastLog.started[1] != nil && fastLog.started[2] != nil })
	const n = 2500
	value := make([]byte, 4096) // random: compression does not shrink it
	_, _ = rand.Read(value)
	done := make(chan []int64)
	go func() {
		var revs []int64
		for i := range n {
			resp, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/s/%c/%d", 'a'+i%2, i%10), Value: value}))
			if err != nil {
				close(done)
				return
			}
			revs = append(revs, resp.Msg.GetRevision())
		}
		done <- revs
	}()
	fast.until(fastLog, func() bool { return len(fastLog.events[1]) >= n })
	revs := <-done
	if len(revs) != n {
		t.Fatal("the puts failed")
	}
	fast.until(fastLog, func() bool { return len(fastLog.events[2]) >= n/2 })
	check := func(who string, l *watchLog) {
		t.Helper()
		for id, every := range map[int64]int{1: 1, 2: 2} {
			var want []int64
			for i := 0; i < n; i += every {
				want = append(want, revs[i])
			}
			if len(l.events[id]) != len(want) {
				t.Fatalf("%s watch %d: %d events, want %d", who, id, len(l.events[id]), len(want))
			}
			for i, ev := range l.events[id] {
				if !strings.HasSuffix(ev, fmt.Sprintf("@%d", want[i])) {
					t.Fatalf("%s watch %d: event %d is %s, want revision %d", who, id, i, ev, want[i])
				}
			}
		}
	}
	check("fast", fastLog)
	slow.until(slowLog, func() bool { return len(slowLog.events[1]) >= n && len(slowLog.events[2]) >= n/2 })
	check("slow", slowLog)
	if slowLog.messages >= n {
		t.Fatalf("the slow session got %d messages for %d changes: nothing was batched", slowLog.messages, n)
	}
	if srv.Server.WatchStats().LogCatchUps == 0 {
		t.Fatal("the slow session never fell out of the ring: the test did not test the catch-up")
	}
	t.Logf("the slow session got %d changes in %d messages; %d change-log reads", n, slowLog.messages, srv.Server.WatchStats().LogCatchUps)
}

// TestServerShutdownEndsSessionsUnavailable: a server that stops ends
// every session with Unavailable, so that its instances open one
// elsewhere or after the restart.
func TestServerShutdownEndsSessionsUnavailable(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _ := start(t, ctx, testserver.HTTPClient(t), srv.URL, "pay-1", connect.WithGRPC())
	s.watch(1, "/k/", 0)
	log := newWatchLog()
	s.until(log, func() bool { return log.started[1] != nil })
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		srv.Stop()
	}()
	if code := s.endsWith(); code != connect.CodeUnavailable {
		t.Fatalf("a session when the server stops: %v", code)
	}
	<-stopped
}

// TestSessionProgressRequestReachesEveryWatch: progress requests ask each
// of the session's watches for a progress notification: after a change
// none of them follows, every watch says it is current at that change's
// revision, however many requests came at once (the server carries out
// the requests one message takes together: each asks every watch).
func TestSessionProgressRequestReachesEveryWatch(t *testing.T) {
	srv := testserver.Start(t, server.WithProgressInterval(time.Hour)) // only the requests bring progress
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := newKV(t, srv)
	s, _ := start(t, ctx, testserver.HTTPClient(t), srv.URL, "pay-1", connect.WithGRPC())
	for id, prefix := range []string{"/p/a/", "/p/b/", "/p/c/"} {
		s.watch(int64(id+1), prefix, 0)
	}
	log := newWatchLog()
	s.until(log, func() bool { return len(log.started) == 3 })
	for id := range int64(3) {
		if got := log.other[id+1]; len(got) != 0 {
			t.Fatalf("watch %d before any request: %v", id+1, got)
		}
	}
	elsewhere := put(t, kv, "/elsewhere", "x")
	for range 100 {
		s.send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_ProgressRequest{ProgressRequest: &pawlv1.SessionProgressRequest{}}})
	}
	want := fmt.Sprintf("progress@%d", elsewhere)
	s.until(log, func() bool {
		for id := range int64(3) {
			if !slices.Contains(log.other[id+1], want) {
				return false
			}
		}
		return true
	})
}

// TestAServerStopsWhileASessionsClientReadsNothing: a session whose
// client stops reading (its connection open, answering HTTP/2's pings)
// holds its writer in a send that flow control does not let through. A
// server that stops does not wait for it past its shutdown timeout:
// Serve returns, and Close, with nothing of the session left running
// (the package's goleak check).
func TestAServerStopsWhileASessionsClientReadsNothing(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	srv, err := server.New(ctx, server.WithDataDir(t.TempDir()), server.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		server.WithShutdownTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	closed := false
	defer func() {
		if !closed { // the test failed before the stop
			stop()
			<-served
			_ = srv.Close()
		}
	}()
	url := "http://" + ln.Addr().String()
	clientCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deaf, _ := start(t, clientCtx, testserver.HTTPClient(t), url, "deaf-1", connect.WithGRPC())
	deaf.watch(1, "/deaf/", 0)
	log := newWatchLog()
	deaf.until(log, func() bool { return log.started[1] != nil })
	// From here the client reads nothing: the session's writer ends up
	// waiting in HTTP/2's write, for good.
	overflowUnread(t, clientCtx, pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), url, connect.WithGRPC()), "/deaf/")
	// The writer waits in x/net's HTTP/2 server (which serves h2c here):
	// seen there in ten looks in a row, 20 ms apart, it is not passing
	// through one write, which every frame does.
	stuck := func() bool {
		for _, g := range goroutines.Stacks() {
			if strings.HasPrefix(g[strings.Index(g, "["):], "[select") && strings.Contains(g, "http2.(*serverConn).writeDataFromHandler(") &&
				strings.Contains(g, "api.(*session).") {
				return true
			}
		}
		return false
	}
	for seen := 0; seen < 10; {
		if stuck() {
			seen++
		} else {
			seen = 0
		}
		select {
		case <-clientCtx.Done():
			t.Fatal("the session's writer never waited in HTTP/2's write")
		case <-time.After(20 * time.Millisecond): // a goroutine's state is not an event: look again
		}
	}
	stop()
	closed = true // from here the test ends the server itself, or fails with it running
	select {
	case err := <-served:
		// Past the timeout the server closes the connections: the stop
		// is not graceful, and Serve says so.
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Serve: %v; want the shutdown timeout's context.DeadlineExceeded (the session held the stop)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve still waits for the session 30 s after its 1 s shutdown timeout")
	}
	closeErr := make(chan error, 1)
	go func() { closeErr <- srv.Close() }()
	select {
	case err := <-closeErr:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close still waits for the session after 30 s")
	}
	if _, err := deaf.Receive(); err == nil {
		// What the client had buffered may come first; the stream ends.
		for err == nil {
			_, err = deaf.Receive()
		}
	}
}

// TestSessionEndsAtOnceWhenItsReplicaLosesRedis: a replica cut off from
// Redis ends its sessions with Unavailable as soon as it notices (the
// instance goes to another replica), even while one of their ACKs waits
// for its audit record, which retries Redis for 10 s: the session does
// not wait for it. The bound is half of those 10 s.
func TestSessionEndsAtOnceWhenItsReplicaLosesRedis(t *testing.T) {
	_, prefix := redistest.Shared(t)
	proxy := faultproxy.NewHolder(t, redistest.Addr())
	srv := testserver.Start(t, server.WithStore("redis://"+proxy.Addr+"/0"), server.WithRedisPrefix(prefix))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, first := start(t, ctx, testserver.HTTPClient(t), srv.URL, "cut-1", connect.WithGRPC())
	digest := "sha256:" + strings.Repeat("ab", 32)
	proxy.Partition()
	s.ack(1, &pawlv1.Ack{ConfigId: "routing", Generation: 1, WorkloadIdentity: "cut-1", BootId: "b", ApplySequence: 1,
		MembershipEpoch: first.GetStarted().GetRecord().GetMembershipEpoch(), ContentDigest: digest, ValidatorDigest: digest,
		State: pawlv1.InstanceState_INSTANCE_STATE_DOWNLOADED})
	ended := make(chan connect.Code, 1)
	go func() { ended <- s.endsWith() }()
	select {
	case code := <-ended:
		if code != connect.CodeUnavailable {
			t.Fatalf("the session of a replica cut off from Redis ended with %v, want Unavailable", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session of a replica cut off from Redis is still open after 5 s: it waits for its ACK's audit record")
	}
	proxy.Heal() // the audit record goes in, and the server stops without waiting out the retries
}

// heldLog holds the audit records of ACKs (RolloutService.Ack, as the
// sessions' ACKs are audited) until the test writes them, fails them, or
// opens the log; the rest it writes at once.
type heldLog struct {
	audit.Log
	held chan *heldAppend // capacity: the most held at once
	mu   sync.Mutex       // guards opened and taken
	// opened: open was called, nothing is held any more; taken: those
	// the test took and has not settled, written at open.
	opened bool
	taken  []*heldAppend
}

// heldAppend is one held audit record; settled once written or failed.
type heldAppend struct {
	ctx     context.Context
	rec     auditchain.Record
	done    func(auditchain.Record, error)
	settled bool
}

func (l *heldLog) AppendAsync(ctx context.Context, rec auditchain.Record, done func(auditchain.Record, error)) {
	if rec.Procedure != pawlv1connect.RolloutServiceAckProcedure {
		l.Log.AppendAsync(ctx, rec, done)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.opened {
		l.Log.AppendAsync(ctx, rec, done)
		return
	}
	select {
	case l.held <- &heldAppend{ctx: ctx, rec: rec, done: done}: // the batches must not wait
	default:
		panic(fmt.Sprintf("heldLog: more than %d audit records held", cap(l.held)))
	}
}

// next takes the next held record, waiting for it until ctx ends (nil).
func (l *heldLog) next(ctx context.Context) *heldAppend {
	select {
	case h := <-l.held:
		l.took(h)
		return h
	case <-ctx.Done():
		return nil
	}
}

// tryNext takes the next held record if there is one (else nil).
func (l *heldLog) tryNext() *heldAppend {
	select {
	case h := <-l.held:
		l.took(h)
		return h
	default:
		return nil
	}
}

func (l *heldLog) took(h *heldAppend) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.taken = append(l.taken, h)
}

// write writes h to the log.
func (l *heldLog) write(h *heldAppend) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h.settled = true
	l.Log.AppendAsync(h.ctx, h.rec, h.done)
}

// fail fails h's append with err.
func (l *heldLog) fail(h *heldAppend, err error) {
	l.mu.Lock()
	h.settled = true
	l.mu.Unlock()
	h.done(auditchain.Record{}, err)
}

// open writes every record held or taken and not settled, and every later
// one at once: a server that closes waits for its sessions' answers.
func (l *heldLog) open() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opened = true
	for len(l.held) > 0 { // the test's goroutine is the only taker: it runs open
		l.taken = append(l.taken, <-l.held)
	}
	for _, h := range l.taken {
		if !h.settled {
			h.settled = true
			l.Log.AppendAsync(h.ctx, h.rec, h.done)
		}
	}
	l.taken = nil
}

// heldAuditSession starts a server whose ACKs' audit records are held
// (up to capacity at once), and a release of the canary rollout; it
// returns the held log, the rollout, canary-1's session once it holds its
// assignment, the release, and canary-1's HEALTHY_ACKED report of it.
func heldAuditSession(t *testing.T, ctx context.Context, capacity int) (*heldLog, *canaryRollout, *session, *pawlv1.Release, *pawlv1.Ack) {
	t.Helper()
	held := &heldLog{held: make(chan *heldAppend, capacity)}
	srv := testserver.Start(t, server.WithAuditWrapper(func(l audit.Log) audit.Log { held.Log = l; return held }))
	t.Cleanup(held.open) // before the server closes: it waits for the answers
	c := newCanaryRollout(t, ctx, srv, connect.WithGRPC())
	register(t, c.is, "main-1", "b", "zone-a", nil)
	s, first := start(t, ctx, testserver.HTTPClient(t), srv.URL, "canary-1", connect.WithGRPC())
	rel := c.create(50)
	for s.recv().GetAssignments() == nil {
	}
	ack := &pawlv1.Ack{ConfigId: "routing", Generation: rel.GetGeneration(), WorkloadIdentity: "canary-1", BootId: "b",
		ApplySequence: rel.GetGeneration(), MembershipEpoch: first.GetStarted().GetRecord().GetMembershipEpoch(),
		ContentDigest: rel.GetContentDigest(), ValidatorDigest: c.digest, State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true}
	return held, c, s, rel, ack
}

// TestSessionAckAnsweredAfterItsAuditRecord: a session's ACK is answered
// only once its audit record is durable: while the record is held, the
// ACK is recorded (the same report sent again is a duplicate) and the
// session goes on (a watch starts), but its answer is not sent; once the
// record is written, it is. When the record cannot be written, the
// answer says the ACK went unaudited, as a unary Ack's does.
func TestSessionAckAnsweredAfterItsAuditRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, c, s, rel, ack := heldAuditSession(t, ctx, 16)

	s.ack(1, ack)
	h := held.next(ctx) // the ACK is recorded: its answer's audit record is under way
	if h == nil {
		t.Fatal("the ACK's audit record never came")
	}
	if dup := c.ack(rel, "canary-1"); dup.GetCounted() || !strings.HasPrefix(dup.GetNotCountedReason(), "duplicate:") {
		t.Fatalf("the report again, while the session's ACK waits for its audit record: %v (want a duplicate: it is recorded)", dup)
	}
	s.watch(7, "/app/", 0)
	log := newWatchLog()
	for log.started[7] == nil {
		m := s.recv()
		if len(m.GetAcks()) > 0 {
			t.Fatalf("an ACK answered before its audit record was written: %v", m.GetAcks())
		}
		log.add(m)
	}
	held.write(h)
	var results []*pawlv1.SessionAckResult
	for len(results) == 0 {
		results = s.recv().GetAcks()
	}
	if len(results) != 1 || results[0].GetAckId() != 1 || !results[0].GetAck().GetCounted() {
		t.Fatalf("the answer once its audit record is written: %v", results)
	}

	s.ack(2, ack)
	if h = held.next(ctx); h == nil {
		t.Fatal("the second ACK's audit record never came")
	}
	held.fail(h, errors.New("disk full"))
	for results = nil; len(results) == 0; {
		results = s.recv().GetAcks()
	}
	if e := results[0].GetError(); len(results) != 1 || results[0].GetAckId() != 2 || e.GetCode() != "unavailable" ||
		!strings.Contains(e.GetMessage(), "unaudited: the request succeeded") || !strings.Contains(e.GetMessage(), "disk full") {
		t.Fatalf("the answer when its audit record cannot be written: %v", results)
	}
}

// TestASessionHoldsAtMostMaxAcksInFlightUnanswered: a session's ACKs wait
// for their answers on the server, at most api.MaxAcksInFlight of them;
// past that the session's next ACK waits, read and not taken, and the
// server reads no more of the session until an answer goes out. Every
// ACK's answer is held here (its audit record is): of 300 ACKs sent at
// once, exactly 256 are taken by the time the receiver waits for room and
// the ACK batches have nothing left to record; once the records are
// written, every ACK is answered once, in the order sent.
func TestASessionHoldsAtMostMaxAcksInFlightUnanswered(t *testing.T) {
	const sent = api.MaxAcksInFlight + 44
	const (
		receiverWaitsForRoom = "github.com/pawlcfg/pawl/server/internal/api.(*session).ack("
		batchesWaitForWork   = "github.com/pawlcfg/pawl/server/internal/rollout.(*ackBatcher).run("
	)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held, _, s, _, ack := heldAuditSession(t, ctx, sent)
	for id := range uint64(sent) {
		s.ack(id+1, ack) // 300 small messages: within HTTP/2's window, the sends do not wait
	}
	// Once both wait, every ACK taken was recorded and its audit record
	// held (the batches hold it before they take the next): none is on
	// its way.
	taken := 0
	for {
		for held.tryNext() != nil {
			taken++
		}
		if taken > api.MaxAcksInFlight {
			t.Fatalf("ACK %d taken while %d were unanswered", taken, taken-1)
		}
		if goroutines.Waiting("select", receiverWaitsForRoom, batchesWaitForWork) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d ACKs taken, and the session's receiver never waited for room", taken)
		case <-time.After(time.Millisecond): // a goroutine's state is not an event: look again
		}
	}
	for held.tryNext() != nil {
		taken++
	}
	if taken != api.MaxAcksInFlight {
		t.Fatalf("%d ACKs taken when the receiver waited for room; want %d", taken, api.MaxAcksInFlight)
	}

	held.open() // the records held, and those of the ACKs taken next
	var results []*pawlv1.SessionAckResult
	for len(results) < sent {
		results = append(results, s.recv().GetAcks()...)
	}
	for i, r := range results {
		if r.GetAckId() != uint64(i+1) || r.GetAck() == nil {
			t.Fatalf("answer %d of %d: %v (want ACK %d, recorded)", i+1, len(results), r, i+1)
		}
	}
	if !results[0].GetAck().GetCounted() {
		t.Fatalf("the first report was not counted: %v", results[0])
	}
}

// sessionWriters counts the goroutines of this process that are a
// session's writer (api's session.run, or runBehind before it).
func sessionWriters() int {
	return goroutines.Count("api.(*session).run(", "api.(*session).runBehind(")
}

// TestAnIdleSessionHoldsNoWriter: a session's writer is a goroutine only
// while the session has something to send. Once twenty sessions have
// their started message and their watch's start, no writer is left; a
// change reaches every session (a writer each, started for it), and
// then none is left again.
func TestAnIdleSessionHoldsNoWriter(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := testserver.HTTPClient(t)
	const n = 20
	var sessions []*session
	var logs []*watchLog
	for i := range n {
		s, _ := start(t, ctx, client, srv.URL, fmt.Sprintf("idle-%d", i), connect.WithGRPC())
		s.watch(1, "/idle/", 0)
		log := newWatchLog()
		s.until(log, func() bool { return log.started[1] != nil })
		sessions, logs = append(sessions, s), append(logs, log)
	}
	noWriters := func(when string) {
		t.Helper()
		for sessionWriters() > 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: %d session writers still run", when, sessionWriters())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	noWriters("after the sessions started")
	kv := pawlv1connect.NewKVServiceClient(client, srv.URL, connect.WithGRPC())
	if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/idle/k", Value: []byte("v")})); err != nil {
		t.Fatal(err)
	}
	for i, s := range sessions {
		s.until(logs[i], func() bool { return len(logs[i].events[1]) == 1 })
	}
	noWriters("after the change reached every session")
}

// TestSessionSendsTheReleasesOfItsAssignmentsInline: a session whose
// hello asks for inline releases gets, with each message of assignments,
// the release each assignment names, as GetRelease with omit_membership
// returns it (without its state and revision, which change): in the
// delta that assigns it and in the full set of the instance's next
// session, unless that session says it holds it. A session that does not
// ask gets none.
func TestSessionSendsTheReleasesOfItsAssignmentsInline(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := testserver.HTTPClient(t)
	c := newCanaryRollout(t, ctx, srv, connect.WithGRPC())
	startInline := func(id string) (*session, *pawlv1.SessionResponse) {
		t.Helper()
		s := openSession(t, ctx, client, srv.URL, &pawlv1.SessionHello{Instance: instanceOf(id), InlineReleases: true}, connect.WithGRPC())
		return s, s.recv()
	}
	nextAssignments := func(s *session) *pawlv1.SessionResponse {
		t.Helper()
		for {
			if m := s.recv(); m.GetAssignments() != nil {
				return m
			}
		}
	}
	register(t, c.is, "main-1", "b", "zone-a", nil) // the release's "everyone" stage
	inline, first := startInline("canary-1")
	plain, _ := start(t, ctx, client, srv.URL, "canary-2", connect.WithGRPC())
	if len(first.GetReleases()) != 0 {
		t.Fatalf("releases with no assignment: %v", first.GetReleases())
	}

	rel := c.create(50)
	got, err := c.rs.GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "routing", Generation: rel.GetGeneration(), OmitMembership: true}))
	if err != nil {
		t.Fatal(err)
	}
	want := got.Msg.GetRelease()
	want.State, want.Revision = pawlv1.ReleaseState_RELEASE_STATE_UNSPECIFIED, 0
	m := nextAssignments(inline)
	if render(m.GetAssignments()) != "routing@1:canary " || len(m.GetReleases()) != 1 || !proto.Equal(m.GetReleases()[0], want) {
		t.Fatalf("the delta that assigns the release: %v, releases %v; want %v", m.GetAssignments(), m.GetReleases(), want)
	}
	if m := nextAssignments(plain); render(m.GetAssignments()) != "routing@1:canary " || len(m.GetReleases()) != 0 {
		t.Fatalf("a session that did not ask: %v", m)
	}
	// The instance comes back: its session resumes the registration.
	_ = inline.CloseRequest()
	if code := inline.endsWith(); code != 0 {
		t.Fatalf("the session ended with %v", code)
	}
	again := openSession(t, ctx, client, srv.URL, &pawlv1.SessionHello{Instance: instanceOf("canary-1"), InlineReleases: true,
		MembershipEpoch: first.GetStarted().GetRecord().GetMembershipEpoch()}, connect.WithGRPC())
	full := again.recv()
	if render(full.GetAssignments()) != "routing@1:canary " || len(full.GetReleases()) != 1 || !proto.Equal(full.GetReleases()[0], want) {
		t.Fatalf("the full set of a later session: %v, releases %v", full.GetAssignments(), full.GetReleases())
	}
	// Once more, naming the release it holds: the full set leaves it out.
	_ = again.CloseRequest()
	if code := again.endsWith(); code != 0 {
		t.Fatalf("the session ended with %v", code)
	}
	holding := openSession(t, ctx, client, srv.URL, &pawlv1.SessionHello{Instance: instanceOf("canary-1"), InlineReleases: true,
		MembershipEpoch: first.GetStarted().GetRecord().GetMembershipEpoch(),
		HeldReleases:    []*pawlv1.HeldRelease{{ConfigId: "routing", Generation: 1, ContentDigest: rel.GetContentDigest()}}}, connect.WithGRPC())
	if full := holding.recv(); render(full.GetAssignments()) != "routing@1:canary " || len(full.GetReleases()) != 0 {
		t.Fatalf("the full set of a session holding the release: %v, releases %v", full.GetAssignments(), full.GetReleases())
	}
}
