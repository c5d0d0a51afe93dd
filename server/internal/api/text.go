package api

import (
	"context"
	"fmt"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk/textsafe"
)

// MaxTextEntries bounds the entries of one repeated string field or map
// of a request (labels, selectors, secret references, dependencies): far
// above what a deploy names, low enough that one request cannot store a
// dictionary in a release.
const MaxTextEntries = 256

// TextInterceptor checks every string of every request, unary or
// streamed, in one place, before a handler sees it: each string (a field,
// an element of a list, a map's key and value, in nested messages too)
// is at most maxBytes long and holds no character that breaks display
// (textsafe.Breaking; fields named "reason" are free text and may hold
// line feeds and tabs); a list or map holds at most MaxTextEntries. Keys
// and prefixes are left to store.ValidateKey, which says more about them.
// A refusal is InvalidArgument naming the field, its size or the
// character and where it is, and the limit with its flag.
func TextInterceptor(maxBytes int) connect.Interceptor { return &textInterceptor{max: maxBytes} }

type textInterceptor struct{ max int }

func (i *textInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if m, ok := req.Any().(proto.Message); ok {
			if err := i.check(m); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

func (i *textInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		// The requests a session carries after its hello are checked one
		// by one by its handler, which answers a refusal in the session.
		ctx = withMessageCheck(ctx, func(_ context.Context, _ string, msg any) error {
			if m, ok := msg.(proto.Message); ok {
				return i.check(m)
			}
			return nil
		}, false)
		return next(ctx, &textCheckedConn{StreamingHandlerConn: conn, i: i})
	}
}

// WrapStreamingClient leaves client streams alone: the server makes none.
func (i *textInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// textCheckedConn checks each message it receives; of a session, its
// hellos (its handler checks the requests it carries).
type textCheckedConn struct {
	connect.StreamingHandlerConn
	i *textInterceptor
}

func (c *textCheckedConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if m, ok := msg.(*pawlv1.SessionRequest); ok && m.GetHello() == nil {
		return nil
	}
	if m, ok := msg.(proto.Message); ok {
		return c.i.check(m)
	}
	return nil
}

func (i *textInterceptor) check(m proto.Message) error {
	return i.message("", m.ProtoReflect())
}

// message checks the fields of m; path names m in the request ("" for
// the request itself).
func (i *textInterceptor) message(path string, m protoreflect.Message) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := join(path, string(fd.Name()))
		switch {
		case fd.IsMap():
			err = i.mapField(name, fd, v.Map())
		case fd.IsList():
			err = i.list(name, fd, v.List())
		default:
			err = i.value(name, fd, v)
		}
		return err == nil
	})
	return err
}

func (i *textInterceptor) list(name string, fd protoreflect.FieldDescriptor, l protoreflect.List) error {
	if fd.Kind() == protoreflect.StringKind && l.Len() > MaxTextEntries {
		return InvalidArgument("%s has %d entries; the limit is %d", name, l.Len(), MaxTextEntries)
	}
	for j := range l.Len() {
		if err := i.value(name+"["+strconv.Itoa(j)+"]", fd, l.Get(j)); err != nil {
			return err
		}
	}
	return nil
}

func (i *textInterceptor) mapField(name string, fd protoreflect.FieldDescriptor, m protoreflect.Map) error {
	if m.Len() > MaxTextEntries {
		return InvalidArgument("%s has %d entries; the limit is %d", name, m.Len(), MaxTextEntries)
	}
	var err error
	m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		entry := fmt.Sprintf("%s[%q]", name, k.String())
		if fd.MapKey().Kind() == protoreflect.StringKind {
			if err = i.text(name+" key", k.String(), false); err != nil {
				return false
			}
		}
		err = i.value(entry, fd.MapValue(), v)
		return err == nil
	})
	return err
}

func (i *textInterceptor) value(name string, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return i.message(name, v.Message())
	case protoreflect.StringKind:
		if fd.Name() == "key" || fd.Name() == "prefix" {
			return nil // store.ValidateKey
		}
		return i.text(name, v.String(), fd.Name() == "reason")
	}
	return nil
}

// text checks one string; free text may hold line feeds and tabs.
func (i *textInterceptor) text(name, s string, free bool) error {
	if len(s) > i.max {
		return InvalidArgument("%s is %d bytes; the limit is %d bytes (pawld --max-text-bytes)", name, len(s), i.max)
	}
	breaking := textsafe.Breaking
	if free {
		breaking = textsafe.FreeTextBreaking
	}
	if p := textsafe.Problem(s, breaking); p != "" {
		return InvalidArgument("%s holds %s; text may not hold control characters, line or paragraph separators, "+
			"or format characters (Unicode Cf: bidirectional, zero width, tag...)", name, p)
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
