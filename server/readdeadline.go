package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// withReadDeadline gives each request d to deliver its body, from when
// its headers were read: a client that trickles a body is cut, with its
// request, and told DeadlineExceeded naming --read-timeout. Once the body
// has been read to its end the deadline no longer matters, so that a
// server stream (a watch) lives on for as long as its client wants it:
// over HTTP/1.1 net/http lifts the connection's deadline itself at the end
// of the body, and over HTTP/2 the deadline is the stream's and cuts only
// a body still unread. Requests of the procedures in open (streams the
// client keeps sending on, such as gRPC reflection) get no deadline;
// HTTP/2 pings find their dead peers.
//
// Why not http.Server.ReadTimeout: it is the same deadline on every
// request, and would cut every client and bidirectional stream after it.
func withReadDeadline(next http.Handler, d time.Duration, open map[string]bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || open[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(d)); err == nil {
			r.Body = &slowBody{ReadCloser: r.Body, timeout: d}
		} // else a writer without deadlines: the connection's own timeouts hold
		next.ServeHTTP(w, r)
	})
}

// slowBody says why a body's read failed at the read deadline.
type slowBody struct {
	io.ReadCloser
	timeout time.Duration
}

func (b *slowBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf(
			"the request body did not arrive within the read timeout of %s (pawld --read-timeout)", b.timeout))
	}
	return n, err
}

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
