package sdk_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/server"
)

// The procedures a client follows the server with.
var (
	sessionCalls          = pawlv1connect.SessionServiceSessionProcedure
	ackCalls              = pawlv1connect.RolloutServiceAckProcedure
	assignmentCalls       = pawlv1connect.InstanceServiceWatchAssignmentsProcedure
	registerCalls         = pawlv1connect.InstanceServiceRegisterProcedure
	watchCalls            = pawlv1connect.KVServiceWatchProcedure
	getReleaseCalls       = pawlv1connect.ReleaseServiceGetReleaseProcedure
	sessionServicePrefix  = "/" + pawlv1connect.SessionServiceName + "/"
	everyStepOfOneRelease = "DISCOVERED,DOWNLOADED,VALIDATED,STAGED,APPLIED,HEALTHY_ACKED"
)

// followThrough runs one traced client through proxy (a Hider) to
// HEALTHY_ACKED of one release while it follows a space on which one key
// is put, and returns its span recorder.
func followThrough(t *testing.T, h *harness, url string) (*sdk.Client, *tracetest.SpanRecorder) {
	t.Helper()
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := h.clientAt(url, "i0", sdk.WithTracerProvider(tp))
	space, err := c.Space(h.ctx, "/flags/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(space.Close)
	h.waitRegistered("i0")
	h.release(50, nil)
	if got := strings.Join(h.awaitBootHealthy(1, c.BootID()), ","); got != everyStepOfOneRelease {
		t.Fatalf("reported %s", got)
	}
	put, err := h.kv.Put(h.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/flags/a", Value: []byte("on")}))
	if err != nil {
		t.Fatal(err)
	}
	if err := space.WaitRevision(h.ctx, put.Msg.GetRevision()); err != nil {
		t.Fatal(err)
	}
	if e, ok := space.Get("/flags/a"); !ok || string(e.Value) != "on" {
		t.Fatalf("the space has %v, %v", e, ok)
	}
	return c, recorder
}

// awaitReconnect runs cut, which breaks c's link, and waits until c
// told of the link going down and then up again.
func awaitReconnect(t *testing.T, h *harness, c *sdk.Client, cut func()) {
	t.Helper()
	links := make(chan sdk.Connection, 16)
	stop := c.OnConnection(func(l sdk.Connection) { links <- l })
	defer stop()
	cut()
	// A first "up" may come before the cut: the link was coming up.
	for down := false; ; {
		select {
		case l := <-links:
			if !l.Up {
				down = true
			} else if down {
				return
			}
		case <-h.ctx.Done():
			t.Fatal("the client did not reconnect")
		}
	}
}

// awaitUp waits until c's link to the server is up: on a session, the
// server has started it (registered the instance and taken hold of its
// lease) before it says so.
func awaitUp(t *testing.T, h *harness, c *sdk.Client) {
	t.Helper()
	links := make(chan sdk.Connection, 16)
	stop := c.OnConnection(func(l sdk.Connection) { links <- l })
	defer stop()
	for l := c.Connection(); !l.Up; {
		select {
		case l = <-links:
		case <-h.ctx.Done():
			t.Fatal("the client's link did not come up")
		}
	}
}

// TestAClientFollowsTheServerOnOneSession: a client registers, follows
// its assignments, takes the release of its assignment from the session
// (sent inline), reports every ACK of a rollout (each with the W3C trace
// context of its step's span) and follows a space, all on one session
// stream: not one Register, WatchAssignments, GetRelease, Ack or Watch
// call reaches the server.
func TestAClientFollowsTheServerOnOneSession(t *testing.T) {
	h := newHarness(t)
	counter := faultproxy.NewHider(t, h.srv.URL)
	_, recorder := followThrough(t, h, counter.URL)
	for _, p := range []string{ackCalls, assignmentCalls, registerCalls, watchCalls, getReleaseCalls} {
		if n := counter.Calls(p); n != 0 {
			t.Errorf("%d calls of %s", n, p)
		}
	}
	if n := counter.Calls(sessionCalls); n != 1 {
		t.Errorf("%d sessions, want 1", n)
	}
	spans := map[string]string{} // span ID -> trace ID
	for _, s := range recorder.Started() {
		spans[s.SpanContext().SpanID().String()] = s.SpanContext().TraceID().String()
	}
	inline := 0
	for _, s := range recorder.Ended() {
		if s.Name() == "pawl.download" && slices.Contains(s.Attributes(), attribute.Bool("pawl.release_inline", true)) {
			inline++
		}
	}
	if inline != 1 {
		t.Errorf("%d pawl.download spans say the release came inline; want 1", inline)
	}
	_, acks := h.acks(1)
	for _, a := range acks {
		parts := strings.Split(a.GetTraceparent(), "-")
		if len(parts) != 4 || spans[parts[2]] != parts[1] || a.GetTraceId() != parts[1] {
			t.Errorf("%s carries traceparent %q (trace ID kept: %q): not a span of the client's", a.GetState(), a.GetTraceparent(), a.GetTraceId())
		}
		if a.GetReportId() == 0 {
			t.Errorf("%s has no report ID", a.GetState())
		}
	}
}

// TestAnOlderServerIsFollowedByItsUnaryCalls: a server without the
// session service (a proxy answers 404 for it, as an older pawld does)
// gets today's calls: the client asks for a session once, remembers the
// answer across reconnects, and registers, follows, reports and watches
// as before.
func TestAnOlderServerIsFollowedByItsUnaryCalls(t *testing.T) {
	h := newHarness(t)
	cut := faultproxy.NewHolder(t, h.srv.Addr)
	older := faultproxy.NewHider(t, "http://"+cut.Addr, sessionServicePrefix)
	c, _ := followThrough(t, h, older.URL)
	for _, p := range []string{ackCalls, assignmentCalls, registerCalls, watchCalls, getReleaseCalls} {
		if older.Calls(p) == 0 {
			t.Errorf("no call of %s", p)
		}
	}
	// The connection breaks; the client comes back to the same server
	// without asking it for a session again.
	streams := older.Calls(assignmentCalls)
	awaitReconnect(t, h, c, func() {
		cut.Partition()
		cut.Heal()
	})
	if older.Calls(assignmentCalls) <= streams {
		t.Error("the client came back without an assignment stream")
	}
	if n := older.Calls(sessionCalls); n != 1 {
		t.Errorf("%d sessions asked for, want 1", n)
	}
}

// TestAServerUpgradedUnderTheClientGetsItsSession: a client that found
// no session on its server (an older pawld) asks it again once the retry
// interval has passed; once the server has one (it was upgraded), the
// client follows it on its session and reports there, not by the unary
// calls.
func TestAServerUpgradedUnderTheClientGetsItsSession(t *testing.T) {
	h := newHarness(t)
	older := faultproxy.NewHider(t, h.srv.URL, sessionServicePrefix)
	c := h.clientAt(older.URL, "i0", sdk.WithSessionRetry(200*time.Millisecond))
	await := func(what string, done func() bool) { // bounded by the harness's context
		t.Helper()
		for !done() {
			select {
			case <-h.ctx.Done():
				t.Fatal(what)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	await("the client without a session never followed its assignment stream", func() bool { return older.Calls(assignmentCalls) > 0 })
	hidden := older.Reveal(sessionCalls)
	await("the client never asked the upgraded server for a session again", func() bool { return older.Calls(sessionCalls) > hidden })
	h.release(50, nil)
	if got := strings.Join(h.awaitBootHealthy(1, c.BootID()), ","); got != everyStepOfOneRelease {
		t.Fatalf("reported %s", got)
	}
	if n := older.Calls(ackCalls); n != 0 {
		t.Fatalf("%d ACKs by the unary call after the server got its session", n)
	}
}

// applyGate holds a client's first apply, just before its swap and its
// APPLIED, until the test lets it go on.
type applyGate struct {
	applying, proceed chan struct{}
	once              sync.Once
}

// newApplyGate returns a gate and the option that puts it in a client.
func newApplyGate() (*applyGate, sdk.Option) {
	g := &applyGate{applying: make(chan struct{}), proceed: make(chan struct{})}
	return g, sdk.WithApplier(func(ctx context.Context, _ *sdk.Snapshot) error {
		g.once.Do(func() {
			close(g.applying)
			select {
			case <-g.proceed:
			case <-ctx.Done():
			}
		})
		return nil
	})
}

// await waits until the client's apply waits at the gate.
func (g *applyGate) await(t *testing.T, h *harness) {
	t.Helper()
	select {
	case <-g.applying:
	case <-h.ctx.Done():
		t.Fatal("the client did not apply the release")
	}
}

// awaitSentAPPLIED lets the client's apply go on while proxy holds what
// clients send, and waits until the APPLIED is in the proxy: over 200
// bytes held (its digests alone are over 128; HTTP/2's own frames that a
// client may send meanwhile are a few dozen). The server has not read it.
func awaitSentAPPLIED(t *testing.T, h *harness, proxy *faultproxy.Holder, g *applyGate) {
	t.Helper()
	proxy.HoldRequests()
	close(g.proceed)
	for proxy.HeldRequests() < 200 {
		select {
		case <-h.ctx.Done():
			t.Fatalf("the client sent %d bytes after the apply; want its APPLIED", proxy.HeldRequests())
		case <-time.After(10 * time.Millisecond): // bytes through a proxy are not an event: look again
		}
	}
	if _, acks := h.acks(1); len(acks) == 0 || acks[len(acks)-1].GetState() != pawlv1.InstanceState_INSTANCE_STATE_STAGED {
		t.Fatalf("the server had %v before the cut; want the STAGED last", acks)
	}
}

// appliedCounted fails the test unless each step of one release of the
// client was stored once, and the APPLIED counted.
func appliedCounted(t *testing.T, h *harness, c *sdk.Client) {
	t.Helper()
	if got := strings.Join(h.awaitBootHealthy(1, c.BootID()), ","); got != everyStepOfOneRelease {
		t.Fatalf("stored %s; want each step once", got)
	}
	_, acks := h.acks(1)
	for _, a := range acks {
		if a.GetState() == pawlv1.InstanceState_INSTANCE_STATE_APPLIED && !a.GetCounted() {
			t.Fatalf("the APPLIED was not counted: %v", a)
		}
	}
}

// TestAnACKCutOffIsAnsweredOnTheNextSession: the session breaks while the
// client's APPLIED waits for its answer:
//   - answer: after the server recorded it, before the answer arrived
//     (what the server sends is held, then dropped with the connection).
//     The client sends it again, with the same report ID, on the next
//     session; the server answers with the record it stored.
//   - request: before the server read it (what the client sends is held,
//     then dropped). The server recorded nothing; the client, which had
//     no answer, sends it again on the next session.
//
// Either way: one APPLIED, counted, and the client, told so, goes on to
// its health window and HEALTHY_ACKED.
func TestAnACKCutOffIsAnsweredOnTheNextSession(t *testing.T) {
	for _, lost := range []string{"answer", "request"} {
		t.Run(lost, func(t *testing.T) {
			h := newHarness(t)
			proxy := faultproxy.NewHolder(t, h.srv.Addr)
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			gate, hold := newApplyGate()
			c := h.clientAt("http://"+proxy.Addr, "i0", hold, sdk.WithMeterProvider(mp))
			h.waitRegistered("i0")
			h.release(50, nil)
			gate.await(t, h)
			// Nothing is in flight: the client has the answer to its STAGED.
			awaitPoint(t, reader, sdk.MetricAcksSent, "pawl.config=routing,pawl.state=STAGED", 1)
			if lost == "answer" {
				proxy.Hold()
				close(gate.proceed)
				h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "APPLIED") })
			} else {
				awaitSentAPPLIED(t, h, proxy, gate)
			}
			proxy.Partition() // what was held is lost with the connection
			proxy.Release()
			proxy.ReleaseRequests()
			proxy.Heal()
			appliedCounted(t, h, c)
			m := awaitPoint(t, reader, sdk.MetricAcksSent, "pawl.config=routing,pawl.state=HEALTHY_ACKED", 1)
			if got := m[sdk.MetricAcksSent]["pawl.config=routing,pawl.state=APPLIED"]; got != 1 || len(m[sdk.MetricAcksFailed]) != 0 {
				t.Fatalf("the client counted %v APPLIED sent, failures %v", got, m[sdk.MetricAcksFailed])
			}
		})
	}
}

// TestASessionHoldsTheLease: an instance whose session is open stays live
// with no heartbeat, long past its lease; once its client closes, the
// lease runs one term.
func TestASessionHoldsTheLease(t *testing.T) {
	clock := testclock.New(time.Now())
	h := newHarness(t, server.WithClock(clock.Now), server.WithInstanceLease(30*time.Second))
	counter := faultproxy.NewHider(t, h.srv.URL)
	c := h.clientAt(counter.URL, "i0")
	// Registered, the instance is live; its session holds the lease only
	// once started, a step later.
	awaitUp(t, h, c)
	h.waitRegistered("i0")
	live := func() bool {
		t.Helper()
		resp, err := h.is.ListInstances(h.ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
		if err != nil || len(resp.Msg.GetInstances()) != 1 {
			t.Fatalf("ListInstances = %v, %v", resp, err)
		}
		return resp.Msg.GetInstances()[0].GetLive()
	}
	clock.Advance(10 * time.Minute)
	if !live() {
		t.Fatal("the instance holding its session lost its lease")
	}
	if n := counter.Calls(sessionCalls); n != 1 || counter.Calls("/Heartbeat") != 0 {
		t.Fatalf("%d sessions and %d heartbeats", n, counter.Calls("/Heartbeat"))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The session's end releases the lease; it then runs out (polled:
	// the server's end of the stream signals nothing the test can see).
	for deadline := time.Now().Add(time.Minute); live(); time.Sleep(time.Millisecond) { // a bound for a loaded machine
		if time.Now().After(deadline) {
			t.Fatal("the lease did not run out after the session ended")
		}
		clock.Advance(time.Minute)
	}
}

// TestAClientAsksEachServerItMovesToForASession: given an older server
// and a newer one, a client on the older follows it by its unary calls;
// when that server cannot be reached it moves on to the newer one, asks
// it for a session, and follows it on that session.
func TestAClientAsksEachServerItMovesToForASession(t *testing.T) {
	h := newHarness(t)
	cut := faultproxy.NewHolder(t, h.srv.Addr)
	older := faultproxy.NewHider(t, "http://"+cut.Addr, sessionServicePrefix)
	newer := faultproxy.NewHider(t, h.srv.URL)
	c := h.clientAt(older.URL+","+newer.URL, "i0")
	h.waitRegistered("i0")
	if older.Calls(sessionCalls) != 1 || newer.Calls(sessionCalls) != 0 {
		t.Fatalf("%d sessions asked of the older server, %d of the newer", older.Calls(sessionCalls), newer.Calls(sessionCalls))
	}
	awaitReconnect(t, h, c, cut.Partition)
	if c.Server() != newer.URL || newer.Calls(sessionCalls) != 1 || newer.Calls(assignmentCalls) != 0 {
		t.Fatalf("on %s: %d sessions, %d assignment streams there", c.Server(), newer.Calls(sessionCalls), newer.Calls(assignmentCalls))
	}
	h.release(50, nil)
	if got := strings.Join(h.awaitBootHealthy(1, c.BootID()), ","); got != everyStepOfOneRelease {
		t.Fatalf("reported %s", got)
	}
	if n := newer.Calls(ackCalls); n != 0 {
		t.Fatalf("%d ACKs by the unary call on the newer server", n)
	}
}

// TestACKsWaitingForASessionGoByTheUnaryCallOnAnOlderServer: the
// client's server breaks while its APPLIED waits for an answer (the
// server never read it); the client moves on to an older server, which
// has no session. What waited is sent by that server's unary Ack: each
// step stored once, the APPLIED counted.
func TestACKsWaitingForASessionGoByTheUnaryCallOnAnOlderServer(t *testing.T) {
	h := newHarness(t)
	newer := faultproxy.NewHolder(t, h.srv.Addr)
	older := faultproxy.NewHider(t, h.srv.URL, sessionServicePrefix)
	gate, hold := newApplyGate()
	c := h.clientAt("http://"+newer.Addr+","+older.URL, "i0", hold)
	h.waitRegistered("i0")
	h.release(50, nil)
	gate.await(t, h)
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "STAGED") })
	awaitSentAPPLIED(t, h, newer, gate)
	newer.Partition() // for good: the client moves on
	newer.ReleaseRequests()
	appliedCounted(t, h, c)
	if c.Server() != older.URL || older.Calls(sessionCalls) == 0 || older.Calls(ackCalls) == 0 {
		t.Fatalf("on %s: %d sessions asked of the older server, %d unary ACKs there", c.Server(), older.Calls(sessionCalls), older.Calls(ackCalls))
	}
}

// TestAnACKWhoseAnswerWasLostIsNotStoredTwice: by the unary call (an
// older server's way, forced), the answer to the first ACK is lost after
// the server stored it; the client sends it again with the same report
// ID, and the server answers with what it stored: each step once.
func TestAnACKWhoseAnswerWasLostIsNotStoredTwice(t *testing.T) {
	h := newHarness(t)
	loser := faultproxy.NewLoser(t, h.srv.URL)
	loser.LoseNext("/Ack", 1)
	c := h.clientAt(loser.URL, "i0", sdk.WithoutSession(), sdk.WithHTTPClient(&http.Client{}))
	h.waitRegistered("i0")
	h.release(50, nil)
	if got := strings.Join(h.awaitBootHealthy(1, c.BootID()), ","); got != everyStepOfOneRelease {
		t.Fatalf("stored %s; want each step once", got)
	}
	if loser.Lost("/Ack") != 1 {
		t.Fatalf("%d answers lost", loser.Lost("/Ack"))
	}
}

// TestAWayWithoutHTTP2IsFollowedByTheUnaryCalls: a client that speaks
// HTTP/1.1 through a proxy that speaks HTTP/1.1 to the server gets no
// answer to its session's hello (the proxy waits for the request's end);
// it gives the session up and follows the server by its unary calls.
//
// Straight to the server over HTTP/1.1, the server answers the session at
// once with 505 (HTTP Version Not Supported), and the client takes that as
// no session: given far longer than the test to wait for the hello, it
// does not wait.
func TestAWayWithoutHTTP2IsFollowedByTheUnaryCalls(t *testing.T) {
	for _, way := range []string{"proxy", "direct"} {
		t.Run(way, func(t *testing.T) {
			h := newHarness(t)
			url, start := h.srv.URL, time.Hour
			if way == "proxy" {
				url, start = faultproxy.NewLoser(t, h.srv.URL).URL, 300*time.Millisecond
			}
			c := h.clientAt(url, "i0", sdk.WithHTTPClient(&http.Client{}), sdk.WithSessionStart(start))
			h.waitRegistered("i0")
			h.release(50, nil)
			if got := strings.Join(h.awaitBootHealthy(1, c.BootID()), ","); got != everyStepOfOneRelease {
				t.Fatalf("stored %s", got)
			}
		})
	}
}

// TestSpacesOnASharedSessionGetEveryChange: one client follows three
// spaces, two of one prefix and one of a prefix under it, on its session,
// which asks for shared events: the server sends a change they all get
// once, and the client hands it to each. Every space ends with exactly
// the keys under its prefix, a transaction's included.
func TestSpacesOnASharedSessionGetEveryChange(t *testing.T) {
	h := newHarness(t)
	c := h.client("i0")
	prefixes := []string{"/sh/", "/sh/", "/sh/a/"}
	var spaces []*sdk.Space
	for _, p := range prefixes {
		s, err := c.Space(h.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		spaces = append(spaces, s)
	}
	h.waitRegistered("i0")
	want := map[string]string{}
	var last int64
	for i := range 10 {
		key := []string{"/sh/a/", "/sh/b/"}[i%2] + string(rune('k'+i))
		resp, err := h.kv.Put(h.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte{byte('0' + i)}}))
		if err != nil {
			t.Fatal(err)
		}
		want[key], last = string([]byte{byte('0' + i)}), resp.Msg.GetRevision()
	}
	txn, err := h.kv.Txn(h.ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{
		{Key: "/sh/a/t", Value: []byte("t1")}, {Key: "/sh/b/t", Value: []byte("t2")}, {Key: "/other/t", Value: []byte("t3")}}}))
	if err != nil {
		t.Fatal(err)
	}
	want["/sh/a/t"], want["/sh/b/t"], last = "t1", "t2", txn.Msg.GetRevision()
	for i, s := range spaces {
		if err := s.WaitRevision(h.ctx, last); err != nil {
			t.Fatalf("space %d (%s): %v", i, prefixes[i], err)
		}
		got := map[string]string{}
		entries, _ := s.Entries()
		for _, e := range entries {
			got[e.Key] = string(e.Value)
		}
		for k, v := range want {
			if strings.HasPrefix(k, prefixes[i]) && got[k] != v {
				t.Errorf("space %d (%s): %s is %q, want %q", i, prefixes[i], k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok || !strings.HasPrefix(k, prefixes[i]) {
				t.Errorf("space %d (%s) has %s", i, prefixes[i], k)
			}
		}
	}
}

// TestASpaceWaitingForAWriteElsewhereAsksForProgress: a space waits for
// the revision of a write under no prefix it follows. On a session it
// asks the server for progress, and the wait ends without the server's
// periodic notification (here an hour away): for a space that follows
// already, and for one that waits as soon as it is made.
func TestASpaceWaitingForAWriteElsewhereAsksForProgress(t *testing.T) {
	h := newHarness(t, server.WithProgressInterval(time.Hour))
	c := h.client("i0")
	h.waitRegistered("i0")
	s, err := c.Space(h.ctx, "/sp/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	put := func(key string) int64 {
		t.Helper()
		resp, err := h.kv.Put(h.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte("v")}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetRevision()
	}
	// The space follows: a change under its prefix reaches it.
	if err := s.WaitRevision(h.ctx, put("/sp/k")); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitRevision(h.ctx, put("/elsewhere/k")); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("/elsewhere/k"); ok {
		t.Fatal("the space holds a key outside its prefix")
	}
	// A space that waits as soon as it is made: its watch may not be open
	// yet when the first request reaches the server; a later one is.
	fresh, err := c.Space(h.ctx, "/fresh/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close)
	if err := fresh.WaitRevision(h.ctx, put("/elsewhere/k2")); err != nil {
		t.Fatal(err)
	}
}

// TestAResumedSessionIsNotSentTheReleasesItHolds: a client that applied
// a release it got inline names it when its session resumes after a cut
// (SessionHello.held_releases), and the full set of assignments that
// follows does not carry it again; no GetRelease is called at all.
func TestAResumedSessionIsNotSentTheReleasesItHolds(t *testing.T) {
	h := newHarness(t)
	cut := faultproxy.NewHolder(t, h.srv.Addr)
	var mu sync.Mutex
	var held []int          // per hello, the releases it names as held
	var startReleases []int // per session's first message, the releases it carries
	downloads := 0
	watcher := faultproxy.NewRewriter(t, "http://"+cut.Addr, func(procedure string, msg proto.Message, request bool) {
		mu.Lock()
		defer mu.Unlock()
		switch m := msg.(type) {
		case *pawlv1.SessionRequest:
			if hello := m.GetHello(); hello != nil {
				held = append(held, len(hello.GetHeldReleases()))
			}
		case *pawlv1.SessionResponse:
			if m.GetStarted() != nil {
				startReleases = append(startReleases, len(m.GetReleases()))
			}
		case *pawlv1.GetReleaseRequest:
			downloads++
		}
	})
	c := h.clientAt(watcher.URL, "i0")
	h.waitRegistered("i0")
	rel := h.release(50, nil)
	has(t, c, rel.GetGeneration())
	awaitReconnect(t, h, c, func() {
		cut.Partition()
		cut.Heal()
	})
	mu.Lock()
	defer mu.Unlock()
	if len(held) < 2 || held[0] != 0 || held[len(held)-1] != 1 {
		t.Fatalf("the hellos named %v releases held; want none first, then the one applied", held)
	}
	if len(startReleases) < 2 || startReleases[len(startReleases)-1] != 0 {
		t.Fatalf("the sessions' first messages carried %v releases; want none after the resume", startReleases)
	}
	if downloads != 0 {
		t.Fatalf("%d GetRelease calls", downloads)
	}
}

// TestACKsABrokenSessionLeftUnansweredGoTogetherOnTheNext: two configs
// apply at once; the session breaks after the client sent both APPLIEDs
// and the server recorded them, before the answers arrived. On the next
// session the client sends both again in one message (a
// SessionAckBatch), with their report IDs; the server answers each with
// the record it stored: each step of each config stored once, both
// APPLIEDs counted, and both go on to HEALTHY_ACKED.
func TestACKsABrokenSessionLeftUnansweredGoTogetherOnTheNext(t *testing.T) {
	h := newHarness(t)
	proxy := faultproxy.NewHolder(t, h.srv.Addr)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	// Each config's applier waits before its swap and APPLIED until both
	// wait there, the client has the answers to both STAGEDs, and what
	// the server sends is held.
	configs := []string{"routing", "routing-b"}
	applying, proceed := make(chan string, len(configs)), make(chan struct{})
	var mu sync.Mutex
	held := map[string]bool{}
	hold := sdk.WithApplier(func(ctx context.Context, s *sdk.Snapshot) error {
		mu.Lock()
		first := !held[s.Config]
		held[s.Config] = true
		mu.Unlock()
		if first {
			applying <- s.Config
			select {
			case <-proceed:
			case <-ctx.Done():
			}
		}
		return nil
	})
	h.clientAt("http://"+proxy.Addr, "i0", hold, sdk.WithMeterProvider(mp))
	h.waitRegistered("i0")
	for _, config := range configs {
		h.release(50, func(s *pawlv1.ReleaseSpec) { s.ConfigId = config })
	}
	for range configs {
		select {
		case <-applying:
		case <-h.ctx.Done():
			t.Fatal("the client did not apply both configs")
		}
	}
	for _, config := range configs {
		awaitPoint(t, reader, sdk.MetricAcksSent, "pawl.config="+config+",pawl.state=STAGED", 1)
	}
	before := sessionAckMessages(t, h)
	proxy.Hold()
	close(proceed)
	h.awaitKV("/_pawl/acks/", func() bool {
		for _, config := range configs {
			if states, _ := h.acksOf(config, 1); !reported(states, "i0", "APPLIED") {
				return false
			}
		}
		return true
	})
	proxy.Partition() // the held answers are lost with the connection
	proxy.Release()
	proxy.Heal()

	for _, config := range configs {
		h.awaitKV("/_pawl/acks/", func() bool {
			states, _ := h.acksOf(config, 1)
			return reported(states, "i0", "HEALTHY_ACKED")
		})
		states, acks := h.acksOf(config, 1)
		if got := strings.Join(states["i0"], ","); got != everyStepOfOneRelease {
			t.Fatalf("%s: stored %s; want each step once", config, got)
		}
		for _, a := range acks {
			if a.GetState() == pawlv1.InstanceState_INSTANCE_STATE_APPLIED && !a.GetCounted() {
				t.Fatalf("%s: the APPLIED was not counted: %v", config, a)
			}
		}
	}
	after := sessionAckMessages(t, h)
	if together := (after.count - after.alone) - (before.count - before.alone); together != 1 {
		t.Fatalf("messages of several ACKs the server took: %v; want 1 (the two APPLIEDs sent again together)", together)
	}
}

// ackMessages are the server's counts of session messages with ACKs: in
// all, and those with one ACK (pawl_session_acks_per_message).
type ackMessages struct{ count, alone float64 }

// sessionAckMessages reads the server's /metrics for ackMessages.
func sessionAckMessages(t *testing.T, h *harness) ackMessages {
	t.Helper()
	resp, err := testserver.HTTPClient(t).Get(h.srv.URL + server.MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v: %s", server.MetricsPath, resp.Status, err, body)
	}
	var m ackMessages
	seen := 0
	for _, line := range strings.Split(string(body), "\n") {
		name, value, _ := strings.Cut(line, " ")
		var to *float64
		switch name {
		case "pawl_session_acks_per_message_count":
			to = &m.count
		case `pawl_session_acks_per_message_bucket{le="1"}`:
			to = &m.alone
		default:
			continue
		}
		if *to, err = strconv.ParseFloat(value, 64); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		seen++
	}
	if seen != 2 {
		t.Fatalf("pawl_session_acks_per_message's count or first bucket is missing from %s", server.MetricsPath)
	}
	return m
}
