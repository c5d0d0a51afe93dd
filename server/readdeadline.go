package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/pawlcfg/pawl/server/internal/api"
)

// withReadDeadline gives each request d to deliver its body, from when
// its headers were read: a client that trickles a body is cut, with its
// request, and told DeadlineExceeded naming --read-timeout. Once the body
// has been read to its end the deadline no longer matters, so that a
// server stream (a watch) lives on for as long as its client wants it:
// over HTTP/1.1 net/http lifts the connection's deadline itself at the end
// of the body, and over HTTP/2 the deadline is the stream's and cuts only
// a body still unread. Requests of the procedures in open (streams the
// client keeps sending on, such as gRPC reflection) get d for their first
// message only: a stream that sends none in time is closed the same way,
// and once one has arrived the deadline is lifted and the stream lives
// on; HTTP/2 pings find their dead peers, and the stream limits bound how
// many one principal holds.
//
// Why not http.Server.ReadTimeout: it is the same deadline on every
// request, and would cut every client and bidirectional stream after it.
func withReadDeadline(next http.Handler, d time.Duration, open map[string]bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
			if open[r.URL.Path] {
				body := &firstMessage{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
				r.Body = &slowBody{ReadCloser: body, timeout: d, what: "the stream's first message"}
				// A session whose sending side failed ends its receiving
				// side with it: its body's reads fail from now on.
				r = r.WithContext(api.WithReadAbort(r.Context(), func() { _ = rc.SetReadDeadline(time.Now()) }))
			} else {
				r.Body = &slowBody{ReadCloser: r.Body, timeout: d, what: "the request body"}
			}
		} // else a writer without deadlines: the connection's own timeouts hold
		next.ServeHTTP(w, r)
	})
}

// slowBody says why a body's read failed at the read deadline; what names
// what was late.
type slowBody struct {
	io.ReadCloser
	timeout time.Duration
	what    string
}

func (b *slowBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf(
			"%s did not arrive within the read timeout of %s (pawld --read-timeout)", b.what, b.timeout))
	}
	return n, err
}

// firstMessage is the body of a client or bidirectional stream: a
// sequence of messages, each behind a 5-byte prefix (flags, big-endian
// length), as gRPC, gRPC-Web and Connect's streaming protocol frame them.
// It calls lift once the first message has been read whole.
type firstMessage struct {
	io.ReadCloser
	lift   func()
	prefix [5]byte
	got    int   // bytes of the prefix read
	left   int64 // bytes of the first message's payload still to come
	done   bool
}

func (f *firstMessage) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if f.done {
		return n, err
	}
	b := p[:n]
	if f.got < len(f.prefix) {
		k := copy(f.prefix[f.got:], b)
		f.got += k
		b = b[k:]
		if f.got < len(f.prefix) {
			return n, err
		}
		f.left = int64(binary.BigEndian.Uint32(f.prefix[1:]))
	}
	if f.left -= int64(len(b)); f.left <= 0 {
		f.done = true
		f.lift()
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
