package faultproxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/pawlcfg/pawl/gen/pawl/v1" // the messages it decodes
)

// Edit changes one message on its way through a Rewriter, in place:
// procedure is the call's path (/pawl.v1.InstanceService/WatchAssignments),
// request says which way it goes (true: to the server).
type Edit func(procedure string, msg proto.Message, request bool)

// Rewriter is a man in the middle on a plain http:// link: a reverse
// proxy that decodes every message of the Connect protocol (unary calls
// and streams, in both directions, the proto codec) and lets an Edit
// change it before it goes on. It speaks HTTP/1.1 and h2c (HTTP/2 with
// prior knowledge, as the SDK's default client) to clients, h2c to the
// server (so that bidirectional streams go through), and asks for answers
// uncompressed so it can read them.
type Rewriter struct {
	// URL is the address clients use instead of the server's.
	URL string
}

// NewRewriter proxies to the server at target (http://host:port) until
// the test ends, passing every message through edit.
func NewRewriter(t testing.TB, target string, edit Edit) *Rewriter {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	proxy.FlushInterval = -1
	proxy.Transport = h2cTransport()
	direct := proxy.Director
	proxy.Director = func(r *http.Request) {
		direct(r)
		r.Header.Del("Accept-Encoding")
		r.Header.Del("Connect-Accept-Encoding")
		in, _, ok := messagesOf(r.URL.Path)
		if !ok || r.Body == nil {
			return
		}
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+") {
			// A stream: each envelope is edited as it goes, and a
			// bidirectional stream goes on while the answers come back.
			pr, pw := io.Pipe()
			src := r.Body
			go func() {
				pw.CloseWithError(rewriteStream(pw, src, in, func(m proto.Message) { edit(r.URL.Path, m, true) }))
			}()
			r.Body = pr
			r.ContentLength = -1
			r.Header.Del("Content-Length")
			return
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err == nil {
			body = rewrite(body, r.Header.Get("Content-Type"), in, func(m proto.Message) { edit(r.URL.Path, m, true) })
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Del("Content-Length")
	}
	proxy.ModifyResponse = func(resp *http.Response) error {
		_, out, ok := messagesOf(resp.Request.URL.Path)
		ct := resp.Header.Get("Content-Type")
		if !ok || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Connect-Content-Encoding") != "" {
			return nil
		}
		onMsg := func(m proto.Message) { edit(resp.Request.URL.Path, m, false) }
		if ct == "application/proto" {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			body = rewrite(body, ct, out, onMsg)
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Del("Content-Length")
			return nil
		}
		if ct == "application/connect+proto" {
			// A stream: each envelope is edited as it arrives.
			pr, pw := io.Pipe()
			src := resp.Body
			go func() {
				err := rewriteStream(pw, src, out, onMsg)
				src.Close()
				pw.CloseWithError(err)
			}()
			resp.Body = pr
			resp.ContentLength = -1
			resp.Header.Del("Content-Length")
		}
		return nil
	}
	return &Rewriter{URL: startFront(t, proxy)}
}

// messagesOf returns the request and answer types of a procedure path.
func messagesOf(procedure string) (in, out protoreflect.MessageType, ok bool) {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(procedure, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return nil, nil, false
	}
	md, isMethod := d.(protoreflect.MethodDescriptor)
	if !isMethod {
		return nil, nil, false
	}
	in, err1 := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	out, err2 := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	return in, out, err1 == nil && err2 == nil
}

// rewrite edits a unary body or a whole stream of envelopes; what it
// cannot decode goes on unchanged.
func rewrite(body []byte, contentType string, mt protoreflect.MessageType, onMsg func(proto.Message)) []byte {
	if contentType == "application/proto" {
		m := mt.New().Interface()
		if proto.Unmarshal(body, m) != nil {
			return body
		}
		onMsg(m)
		if b, err := proto.Marshal(m); err == nil {
			return b
		}
		return body
	}
	var out bytes.Buffer
	if rewriteStream(&out, bytes.NewReader(body), mt, onMsg) != nil {
		return body
	}
	return out.Bytes()
}

// rewriteStream copies Connect envelopes from src to dst, editing each
// message (not the end-of-stream one).
func rewriteStream(dst io.Writer, src io.Reader, mt protoreflect.MessageType, onMsg func(proto.Message)) error {
	var head [5]byte
	for {
		if _, err := io.ReadFull(src, head[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		payload := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(src, payload); err != nil {
			return err
		}
		if head[0] == 0 { // a message, uncompressed
			m := mt.New().Interface()
			if err := proto.Unmarshal(payload, m); err != nil {
				return fmt.Errorf("faultproxy: decode a streamed message: %w", err)
			}
			onMsg(m)
			b, err := proto.Marshal(m)
			if err != nil {
				return err
			}
			payload = b
			binary.BigEndian.PutUint32(head[1:], uint32(len(payload)))
		}
		if _, err := dst.Write(head[:]); err != nil {
			return err
		}
		if _, err := dst.Write(payload); err != nil {
			return err
		}
		if f, ok := dst.(interface{ Flush() }); ok {
			f.Flush()
		}
	}
}

// Rename is an Edit that renames a string everywhere: every string field
// (in messages at any depth, in lists and map values) equal to from
// becomes to in answers, and to becomes from again in requests, so that
// the server never sees the new name and the client never sees the old.
func Rename(from, to string) Edit {
	return func(_ string, msg proto.Message, request bool) {
		if request {
			replaceStrings(msg.ProtoReflect(), to, from)
		} else {
			replaceStrings(msg.ProtoReflect(), from, to)
		}
	}
}

func replaceStrings(m protoreflect.Message, from, to string) {
	var renamed []protoreflect.FieldDescriptor // set after the walk: Range must not see m change
	defer func() {
		for _, fd := range renamed {
			m.Set(fd, protoreflect.ValueOfString(to))
		}
	}()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				switch fd.Kind() {
				case protoreflect.StringKind:
					if l.Get(i).String() == from {
						l.Set(i, protoreflect.ValueOfString(to))
					}
				case protoreflect.MessageKind, protoreflect.GroupKind:
					replaceStrings(l.Get(i).Message(), from, to)
				}
			}
		case fd.IsMap():
			if k := fd.MapValue().Kind(); k == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					replaceStrings(mv.Message(), from, to)
					return true
				})
			}
		case fd.Kind() == protoreflect.StringKind:
			if v.String() == from {
				renamed = append(renamed, fd)
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			replaceStrings(v.Message(), from, to)
		}
		return true
	})
}
