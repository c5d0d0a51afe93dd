package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// marshalJSON is m's protojson form with every enum value written by its
// short name, without the enum's prefix ("HEALTHY_ACKED", not
// "INSTANCE_STATE_HEALTHY_ACKED"): the spelling of the text output and of
// the state counts (StageStatus.states), so that -o json names each state
// one way.
func marshalJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("re-read %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	shortenMessage(m.ProtoReflect().Descriptor(), v)
	return json.Marshal(v)
}

// shortenMessage shortens the enum values of v, the JSON form of a
// message of type md, in place.
func shortenMessage(md protoreflect.MessageDescriptor, v any) {
	obj, ok := v.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return // well-known types have their own JSON forms
	}
	fields := md.Fields()
	for k, val := range obj {
		fd := fields.ByJSONName(k)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(k))
		}
		if fd == nil {
			continue
		}
		switch {
		case fd.IsMap():
			if entries, ok := val.(map[string]any); ok {
				for mk, mv := range entries {
					entries[mk] = shortenValue(fd.MapValue(), mv)
				}
			}
		case fd.IsList():
			if list, ok := val.([]any); ok {
				for i, e := range list {
					list[i] = shortenValue(fd, e)
				}
			}
		default:
			obj[k] = shortenValue(fd, val)
		}
	}
}

// shortenValue returns v, the JSON form of one value of field fd, with its
// enum values shortened.
func shortenValue(fd protoreflect.FieldDescriptor, v any) any {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if s, ok := v.(string); ok {
			return strings.TrimPrefix(s, enumPrefix(fd.Enum()))
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		shortenMessage(fd.Message(), v)
	}
	return v
}

// enumPrefix is the prefix buf's lint rules give every value of ed: its
// name in upper snake case and "_" (InstanceState: "INSTANCE_STATE_").
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	var b strings.Builder
	for i, r := range string(ed.Name()) {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	b.WriteByte('_')
	return b.String()
}
