package server

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// withReadDeadline gives each request d to deliver its body, from when
// its headers were read: a client that trickles a body is cut, with its
// request. The deadline is lifted once the body is read to its end, so
// that a server stream (a watch) lives on for as long as its client wants
// it; HTTP/2 pings find its dead peers. Requests of the procedures in
// open (streams the client keeps sending on) get no deadline.
//
// Why not http.Server.ReadTimeout: over HTTP/1.1 it is a deadline on the
// connection, and when it passes while a response streams, net/http's
// read in the background, which waits for the client to go away, fails
// and cancels the request: every Connect watch over HTTP/1.1 would end
// after it. Over HTTP/2 it is per stream and cuts only bodies still
// unread, as this does.
func withReadDeadline(next http.Handler, d time.Duration, open map[string]bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || open[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			next.ServeHTTP(w, r) // a writer without deadlines: the connection's own timeouts hold
			return
		}
		r.Body = &liftOnEOF{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		next.ServeHTTP(w, r)
	})
}

// liftOnEOF lifts the read deadline when the body has been read to its
// end.
type liftOnEOF struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *liftOnEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.lifted {
		b.lifted = true
		b.lift()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = errBodyTooSlow
	}
	return n, err
}

// errBodyTooSlow is what a handler reads from a body that did not arrive
// within the read timeout.
var errBodyTooSlow = errors.New("server: the request body did not arrive within the read timeout (pawld --read-timeout)")

// clientStreams are the procedures among services whose client sends a
// stream of messages (client and bidirectional streaming, such as gRPC
// reflection): their request bodies stay open for the call's life, and
// get no read deadline.
func clientStreams(services ...string) map[string]bool {
	out := map[string]bool{}
	for _, name := range services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			continue
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			continue
		}
		for i := range sd.Methods().Len() {
			if m := sd.Methods().Get(i); m.IsStreamingClient() {
				out["/"+name+"/"+string(m.Name())] = true
			}
		}
	}
	return out
}
