package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Source is what the typed reads (Value, Lookup) read from: a *Client
// (the config's current snapshot), a *Snapshot (that snapshot; the id must
// be its config's, or empty), or a *Space (id is a key relative to the
// space's prefix, whose value is JSON). Its method is unexported: only
// those three implement it.
type Source interface {
	content(id string) (doc *document, err error)
}

// ErrNotFound is returned by Lookup when the pointer names nothing in the
// config (a missing member, an index past an array's end).
var ErrNotFound = errors.New("sdk: no value at the pointer")

// ErrNotJSON is returned by Lookup when the content is not JSON.
var ErrNotJSON = errors.New("not JSON")

// Value reads the value at pointer in config id of src as a T, or returns
// def when there is none (no snapshot, no such member, content that is not
// JSON, or a value that is not a T). pointer is a JSON pointer (RFC 6901,
// "/limits/max_amount", "" for the whole document) or a dotted path
// ("limits.max_amount", array elements by index: "upstreams.0.host"). It
// never blocks, and decodes a snapshot's content once, however many reads:
//
//	max := sdk.Value(client, "limits", "/max_amount", 100)
//
// Use Lookup to tell a default from an error.
func Value[T any](src Source, id, pointer string, def T) T {
	v, err := Lookup[T](src, id, pointer)
	if err != nil {
		return def
	}
	return v
}

// Lookup reads the value at pointer (see Value) in config id of src as a
// T. It fails with ErrNoSnapshot when src has no snapshot of id (or a
// space no such key), ErrNotFound when the pointer names nothing,
// ErrNotJSON when the content is not JSON, and a
// decoding error naming the config, the pointer and T when the value is
// not a T. JSON null is not found. A number reads as any numeric T that
// holds it exactly.
func Lookup[T any](src Source, id, pointer string) (T, error) {
	var zero T
	if isNil(src) {
		return zero, ErrNoSnapshot
	}
	doc, err := src.content(id)
	if err != nil {
		return zero, err
	}
	tokens, err := splitPointer(pointer)
	if err != nil {
		return zero, err
	}
	root, err := doc.root()
	if err != nil {
		return zero, err
	}
	v, err := walk(root, tokens)
	if err != nil {
		return zero, fmt.Errorf("sdk: %s %q: %w", doc.name, pointer, err)
	}
	if v == nil {
		return zero, fmt.Errorf("sdk: %s %q is null: %w", doc.name, pointer, ErrNotFound)
	}
	switch v.(type) {
	case string, bool:
		if direct, ok := v.(T); ok {
			return direct, nil
		}
	}
	// Anything else (numbers, objects and arrays, which the tree shares
	// with every read) goes through JSON: only the value's own bytes,
	// not the document, are encoded again, into a T of the caller's own.
	raw, err := json.Marshal(v)
	if err != nil {
		return zero, fmt.Errorf("sdk: %s %q: %w", doc.name, pointer, err)
	}
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		return zero, fmt.Errorf("sdk: %s %q as %s: %w", doc.name, pointer, reflect.TypeFor[T](), err)
	}
	return out, nil
}

func isNil(src Source) bool {
	if src == nil {
		return true
	}
	v := reflect.ValueOf(src)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// document is content decoded once into JSON values (numbers as
// json.Number, so that integers stay exact).
type document struct {
	name  string // "config routing generation 7", "key /flags/a"
	bytes []byte
	tree  *decoded[any]
}

func (d *document) root() (any, error) {
	d.tree.once.Do(func() {
		dec := json.NewDecoder(bytes.NewReader(d.bytes))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			d.tree.err = fmt.Errorf("sdk: %s is %w: %w", d.name, ErrNotJSON, err)
			return
		}
		d.tree.v = &v
	})
	if d.tree.err != nil {
		return nil, d.tree.err
	}
	return *d.tree.v, nil
}

// treeKey is the key of a snapshot's decoded tree in its typed cache.
type treeKey struct{}

func (s *Snapshot) content(id string) (*document, error) {
	if id != "" && id != s.Config {
		return nil, fmt.Errorf("sdk: the snapshot is of %s, not %s: %w", s.Config, id, ErrNoSnapshot)
	}
	v, ok := s.typed.Load(treeKey{})
	if !ok {
		v, _ = s.typed.LoadOrStore(treeKey{}, &decoded[any]{})
	}
	return &document{name: fmt.Sprintf("config %s generation %d", s.Config, s.Generation), bytes: s.Content, tree: v.(*decoded[any])}, nil
}

func (c *Client) content(id string) (*document, error) {
	s := c.Config(id)
	if s == nil {
		return nil, fmt.Errorf("sdk: config %s: %w", id, ErrNoSnapshot)
	}
	return s.content(id)
}

// content reads key, relative to the space's prefix; the value is decoded
// on each read (a space's values are small, and change key by key).
func (s *Space) content(key string) (*document, error) {
	full := s.prefix + key
	e, ok := s.Get(full)
	if !ok {
		return nil, fmt.Errorf("sdk: space %q has no key %s: %w", s.prefix, full, ErrNoSnapshot)
	}
	return &document{name: "key " + full, bytes: e.Value, tree: &decoded[any]{}}, nil
}

// splitPointer parses a JSON pointer ("/a/b~1c") or a dotted path
// ("a.b") into its reference tokens.
func splitPointer(p string) ([]string, error) {
	switch {
	case p == "":
		return nil, nil
	case strings.HasPrefix(p, "/"):
		tokens := strings.Split(p[1:], "/")
		for i, t := range tokens {
			if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(t, "~0", ""), "~1", ""), "~") {
				return nil, fmt.Errorf("sdk: JSON pointer %q: ~ must be followed by 0 or 1", p)
			}
			tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		}
		return tokens, nil
	default:
		return strings.Split(p, "."), nil
	}
}

// walk follows tokens from v.
func walk(v any, tokens []string) (any, error) {
	for i, t := range tokens {
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[t]
			if !ok {
				return nil, fmt.Errorf("no member %q: %w", t, ErrNotFound)
			}
			v = next
		case []any:
			n, err := strconv.Atoi(t)
			if err != nil || n < 0 || strconv.Itoa(n) != t {
				return nil, fmt.Errorf("%q is not an array index: %w", t, ErrNotFound)
			}
			if n >= len(node) {
				return nil, fmt.Errorf("index %d past the array's %d elements: %w", n, len(node), ErrNotFound)
			}
			v = node[n]
		default:
			return nil, fmt.Errorf("%q: %s is not an object or array: %w", t, strings.Join(tokens[:i], "/"), ErrNotFound)
		}
	}
	return v, nil
}
