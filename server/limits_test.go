package server_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/sdk/pawlerr"
	"github.com/pawlcfg/pawl/server"
)

// limitBound bounds every wait of these tests: far above the timeouts
// they set, so that a loaded machine does not fail them, and far below
// what a server without the limit would take (forever).
const limitBound = 30 * time.Second

// fromAddr is an HTTP client whose connections come from the loopback
// address ip (127.0.0.0/8 is all loopback on Linux), so that one test
// plays several remote addresses. h2c unless http1; dials counts its
// connections.
func fromAddr(t testing.TB, ip string, http1 bool, dials *atomic.Int64) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	var p http.Protocols
	if http1 {
		p.SetHTTP1(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials != nil {
			dials.Add(1)
		}
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// closeWatcher is a connection that says when the server closed it: a
// read returned an error.
type closeWatcher struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *closeWatcher) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.once.Do(func() { close(c.closed) })
	}
	return n, err
}

// TestIdleConnectionsAreClosed: a connection that carried a call and then
// nothing is closed by the server after the idle timeout, over HTTP/1.1
// and HTTP/2, while one that holds a watch stream stays open.
func TestIdleConnectionsAreClosed(t *testing.T) {
	srv := testserver.Start(t, server.WithTimeouts(time.Minute, time.Minute, 300*time.Millisecond))
	for _, http1 := range []bool{true, false} {
		t.Run(fmt.Sprintf("http1=%v", http1), func(t *testing.T) {
			conns := make(chan *closeWatcher, 4)
			var p http.Protocols
			p.SetHTTP1(http1)
			p.SetUnencryptedHTTP2(!http1)
			tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				w := &closeWatcher{Conn: c, closed: make(chan struct{})}
				conns <- w
				return w, nil
			}}
			t.Cleanup(tr.CloseIdleConnections)
			kv := pawlv1connect.NewKVServiceClient(&http.Client{Transport: tr}, srv.URL)
			if _, err := kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: "/idle/k", Value: []byte("v")})); err != nil {
				t.Fatal(err)
			}
			c := <-conns
			select {
			case <-c.closed:
			case <-time.After(limitBound):
				t.Fatalf("an idle connection is still open %s after the call; the idle timeout is 300ms", limitBound)
			}
		})
	}
}

// TestTricklingBodyIsCutWhileWatchLivesOn: a request body that trickles
// in is cut at the read timeout, over HTTP/1.1 and HTTP/2, and changes
// nothing; the same deadline does not cut watch streams, over HTTP/1.1
// and HTTP/2, opened before and still delivering after it.
func TestTricklingBodyIsCutWhileWatchLivesOn(t *testing.T) {
	const readTimeout = 500 * time.Millisecond
	srv := testserver.Start(t, server.WithTimeouts(time.Minute, readTimeout, time.Minute))
	grpcKV := newKV(t, srv)
	connectKV := pawlv1connect.NewKVServiceClient(testserver.HTTP1Client(t), srv.URL)
	watches := []*watchStream{openWatch(t, grpcKV, "/trickle/", 0), openWatch(t, connectKV, "/trickle/", 0)}
	before := currentRevision(t, grpcKV)
	// A bidirectional stream (gRPC reflection) keeps its request body open
	// for its life: the read timeout is not for it.
	reflection := grpcreflect.NewClient(testserver.HTTPClient(t), srv.URL, connect.WithGRPC()).NewStream(context.Background())
	defer func() { _, _ = reflection.Close() }()
	if _, err := reflection.ListServices(); err != nil {
		t.Fatal(err)
	}

	t.Run("http1", func(t *testing.T) {
		c, err := net.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const bodyLen = 100_000
		if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: pawl\r\nContent-Type: application/proto\r\nContent-Length: %d\r\n\r\n",
			pawlv1connect.KVServicePutProcedure, bodyLen); err != nil {
			t.Fatal(err)
		}
		answered := make(chan string, 1)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answered <- "connection closed: " + err.Error()
				return
			}
			body, _ := io.ReadAll(resp.Body)
			answered <- fmt.Sprintf("%s %s", resp.Status, body)
		}()
		trickle(t, c, answered, "504 Gateway Timeout", "deadline_exceeded", "--read-timeout")
	})

	t.Run("http2", func(t *testing.T) {
		body, bodyW := io.Pipe()
		defer bodyW.Close()
		req, err := http.NewRequest(http.MethodPost, srv.URL+pawlv1connect.KVServicePutProcedure, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("TE", "trailers")
		client := testserver.HTTPClient(t)
		answered := make(chan string, 1)
		go func() {
			resp, err := client.Do(req)
			if err != nil {
				answered <- "failed: " + err.Error()
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			answered <- fmt.Sprintf("grpc-status %s %s", resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message"))
		}()
		var envelope [5]byte
		binary.BigEndian.PutUint32(envelope[1:], 100_000)
		if _, err := bodyW.Write(envelope[:]); err != nil {
			t.Fatal(err)
		}
		trickle(t, bodyW, answered, "grpc-status 4 ", "--read-timeout")
		// The connection carries other calls on.
		if _, err := pawlv1connect.NewKVServiceClient(client, srv.URL, connect.WithGRPC()).List(context.Background(),
			connect.NewRequest(&pawlv1.ListRequest{PageSize: 1})); err != nil {
			t.Errorf("a call after the cut, on the same connection: %v", err)
		}
	})
	if now := currentRevision(t, grpcKV); now != before {
		t.Errorf("the cut bodies changed the store: revision %d, was %d", now, before)
	}

	// Both cuts took longer than the read timeout: the watches and the
	// reflection stream outlived it.
	if _, err := reflection.ListServices(); err != nil {
		t.Errorf("a reflection stream after the read timeout: %v", err)
	}
	rev := put(t, grpcKV, "/trickle/k", "v")
	for i, w := range watches {
		evs := w.events(t, 1)
		if got := evs[len(evs)-1].GetKv(); got.GetKey() != "/trickle/k" || got.GetModRevision() != rev {
			t.Errorf("watch %d: last event %v, want /trickle/k at %d", i, got, rev)
		}
	}
}

// trickle writes a byte of body every 10ms until the server answers (or
// closes the connection), which it must within limitBound; the answer
// must say each of want.
func trickle(t *testing.T, w io.Writer, answered <-chan string, want ...string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	bound := time.After(limitBound)
	for {
		select {
		case line := <-answered:
			for _, w := range want {
				if !strings.Contains(line, w) {
					t.Errorf("a trickled body was answered %q; want it to say %q", line, w)
				}
			}
			return
		case <-bound:
			t.Fatalf("a body trickling in for %s was not cut", limitBound)
		case <-tick.C:
			_, _ = w.Write([]byte{0x0a})
		}
	}
}

// TestConnectionFloodFromOneAddress: thousands of connections from one
// address get the limit per address, and the rest are closed at once; a
// call from another address answers; once every slot is taken, a new
// address is refused and the admin network still gets in, through the
// reserve.
func TestConnectionFloodFromOneAddress(t *testing.T) {
	const total, perAddr, reserved, flood = 200, 50, 8, 2000
	srv := testserver.Start(t, server.WithConnLimits(total, perAddr, reserved),
		server.WithAdminNetworks(netip.MustParsePrefix("127.0.0.1/32")), server.WithTimeouts(time.Minute, time.Minute, time.Minute))
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	dial := func(from string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: limitBound}
		c, err := d.Dial("tcp", srv.Addr)
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	for range flood {
		// A connection refused before the dial returned fails it with a
		// reset.
		if _, err := dial("127.0.0.2"); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatal(err)
		}
	}
	awaitConns(t, srv, func(st server.ConnStats) bool { return int(st.Refused)+st.Open >= flood })
	if st := srv.Server.ConnStats(); st.Open != perAddr || st.Refused != flood-perAddr {
		t.Fatalf("after a flood of %d connections from one address: %+v, want %d open and the rest refused", flood, st, perAddr)
	}

	other := pawlv1connect.NewKVServiceClient(fromAddr(t, "127.0.0.3", false, nil), srv.URL, connect.WithGRPC())
	put(t, other, "/flood/k", "v")

	// Fill the total from more addresses, each connection proved
	// accepted by an answer on it.
	for i := 0; srv.Server.ConnStats().Open < total; i++ {
		c, err := dial(fmt.Sprintf("127.0.1.%d", 1+i/perAddr))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "GET /nothing HTTP/1.1\r\nHost: pawl\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatalf("connection %d of the fill: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), limitBound)
	defer cancel()
	stranger := pawlv1connect.NewKVServiceClient(fromAddr(t, "127.0.0.4", false, nil), srv.URL, connect.WithGRPC())
	if _, err := stranger.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/flood/k"})); err == nil {
		t.Errorf("with every slot taken, a call from a new address outside the admin networks answered")
	}
	admin := pawlv1connect.NewKVServiceClient(fromAddr(t, "127.0.0.1", false, nil), srv.URL, connect.WithGRPC())
	if _, err := admin.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/flood/k"})); err != nil {
		t.Errorf("with every slot taken, a call from the admin network: %v", err)
	}
	if st := srv.Server.ConnStats(); st.Open != total+1 {
		t.Errorf("connections open: %+v, want the total %d and one of the reserve", st, total)
	}
}

// awaitConns waits until the server's connection counters satisfy ok.
func awaitConns(t *testing.T, srv *testserver.Server, ok func(server.ConnStats) bool) {
	t.Helper()
	bound := time.Now().Add(limitBound)
	for !ok(srv.Server.ConnStats()) {
		if time.Now().After(bound) {
			t.Fatalf("connection counters after %s: %+v", limitBound, srv.Server.ConnStats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openStream opens a KV watch or an assignment watch and waits for its
// first message; it returns the error the stream ended with instead, if
// it ended.
func openStream(ctx context.Context, kv pawlv1connect.KVServiceClient, is pawlv1connect.InstanceServiceClient, assignments bool) (context.CancelFunc, error) {
	ctx, cancel := context.WithCancel(ctx)
	var err error
	if assignments {
		err = firstMessage(is.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: "app-1"})))
	} else {
		err = firstMessage(kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/app/"})))
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return cancel, nil
}

// firstMessage waits for a stream's first message, or says why there was
// none.
func firstMessage[T any](s *connect.ServerStreamForClient[T], err error) error {
	if err != nil || s.Receive() {
		return err
	}
	if s.Err() != nil {
		return s.Err()
	}
	return errors.New("the stream ended without a message")
}

// TestWatcherLimitPerPrincipal: a principal's watcher over the limit, KV
// watch or assignment watch, gets ResourceExhausted naming the limit and
// its flag; another principal still watches, an admin is exempt, and
// closing a watch frees its slot.
func TestWatcherLimitPerPrincipal(t *testing.T) {
	const limit = 4
	tokens := map[string]string{}
	var yaml strings.Builder
	yaml.WriteString("tokens:\n")
	for name, grants := range map[string]string{
		"fleet": `[{role: reader, prefixes: ["/app/"]}, {role: instance, identities: ["app-*"]}]`,
		"other": `[{role: reader, prefixes: ["/app/"]}]`,
		"ops":   `[{role: admin}]`,
	} {
		token, hash := testserver.NewToken(t)
		tokens[name] = token
		fmt.Fprintf(&yaml, "  - principal: %s\n    hash: %s\n    grants: %s\n", name, hash, grants)
	}
	srv := testserver.Start(t, server.WithAuthFile(testserver.WriteAuthFile(t, yaml.String())), server.WithStreamLimits(0, limit))
	as := func(name string) (pawlv1connect.KVServiceClient, pawlv1connect.InstanceServiceClient) {
		client := testserver.BearerClient(t, tokens[name])
		return pawlv1connect.NewKVServiceClient(client, srv.URL, connect.WithGRPC()), pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	}
	ctx, cancelAll := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelAll()
	var cancels []context.CancelFunc
	open := func(what string, kv pawlv1connect.KVServiceClient, is pawlv1connect.InstanceServiceClient, assignments bool) {
		t.Helper()
		cancel, err := openStream(ctx, kv, is, assignments)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		cancels = append(cancels, cancel)
	}
	fleetKV, fleetIS := as("fleet")
	open("the fleet's assignment watch", nil, fleetIS, true)
	for i := 1; i < limit; i++ {
		open(fmt.Sprintf("the fleet's watcher %d of %d", i+1, limit), fleetKV, nil, false)
	}
	_, err := openStream(ctx, nil, fleetIS, true)
	wantCode(t, "an assignment watch over the limit", err, connect.CodeResourceExhausted, "--max-watchers-per-principal 4", `principal "fleet"`)
	_, err = openStream(ctx, fleetKV, nil, false)
	wantCode(t, "a KV watch over the limit", err, connect.CodeResourceExhausted, "--max-watchers-per-principal 4")

	otherKV, _ := as("other")
	opsKV, _ := as("ops")
	for i := range limit + 2 {
		if i < limit {
			open("another principal, while the fleet holds its limit", otherKV, nil, false)
		}
		open("an admin, beyond the limit", opsKV, nil, false)
	}

	// Closing the assignment watch frees a slot once its handler ended;
	// until then each attempt is refused at once.
	cancels[0]()
	bound := time.Now().Add(limitBound)
	for {
		cancel, err := openStream(ctx, nil, fleetIS, true)
		if err == nil {
			cancels = append(cancels, cancel)
			break
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted || time.Now().After(bound) {
			t.Fatalf("after closing a watch: %v", err)
		}
	}
	for _, c := range cancels {
		c()
	}
}

// TestStreamFloodOverOneConnection: hundreds of streams at once over one
// HTTP/2 connection from one address (no auth file: the limits hold per
// address) get the limit, the rest ResourceExhausted naming it; the same
// connection still answers calls, and another address still watches.
func TestStreamFloodOverOneConnection(t *testing.T) {
	const streams, flood = 20, 300
	srv := testserver.Start(t, server.WithStreamLimits(streams, 0))
	var dials atomic.Int64
	kv := pawlv1connect.NewKVServiceClient(fromAddr(t, "127.0.0.2", false, &dials), srv.URL, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	put(t, kv, "/app/k", "v") // the connection, before the flood
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		opened    []context.CancelFunc
		exhausted int
		other     []error
	)
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cancel, err := openStream(ctx, kv, nil, false)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				opened = append(opened, cancel)
			case connect.CodeOf(err) == connect.CodeResourceExhausted && strings.Contains(err.Error(), "--max-streams-per-principal 20") &&
				strings.Contains(err.Error(), "address 127.0.0.2"):
				if l, ok := pawlerr.LimitFrom(err); !ok || l.GetLimit() != "--max-streams-per-principal" || l.GetLimitValue() != 20 ||
					l.GetValue() != 20 || l.GetUnit() != "streams" {
					other = append(other, fmt.Errorf("%w: detail %v, want LimitExceeded{--max-streams-per-principal, 20 of 20 streams}", err, l))
					return
				}
				exhausted++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range opened {
			c()
		}
	}()
	if len(opened) != streams || exhausted != flood-streams || len(other) > 0 {
		t.Fatalf("%d streams at once: %d opened, %d ResourceExhausted naming the limit, others %v; want %d opened", flood, len(opened), exhausted, other, streams)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the flood took %d connections, want 1", n)
	}
	put(t, kv, "/app/k", "v2")
	otherKV := pawlv1connect.NewKVServiceClient(fromAddr(t, "127.0.0.3", false, nil), srv.URL, connect.WithGRPC())
	c, err := openStream(ctx, otherKV, nil, false)
	if err != nil {
		t.Fatalf("another address, while the first holds its limit: %v", err)
	}
	defer c()

}
