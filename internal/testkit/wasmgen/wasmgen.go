// Package wasmgen writes small WebAssembly modules byte by byte, for tests
// that need modules no toolchain would produce: compile bombs, modules
// with forbidden imports, malformed sections. It is test-only.
package wasmgen

// Value types.
const (
	I32 byte = 0x7f
	I64 byte = 0x7e
)

// FuncType is a function signature.
type FuncType struct{ Params, Results []byte }

// Import is a function import of type Type (an index into Module.Types).
type Import struct {
	Module, Name string
	Type         int
}

// Func is a defined function of type Type, with Locals i32 locals and Body
// its instructions (without the final end, which Encode adds).
type Func struct {
	Type   int
	Locals int
	Body   []byte
}

// Export exports a function (or, with Memory set, memory 0) as Name.
type Export struct {
	Name   string
	Func   int // index among imports then defined functions
	Memory bool
}

// Module is a module to encode. MemoryPages > 0 defines memory 0 with
// that many pages.
type Module struct {
	Types       []FuncType
	Imports     []Import
	Funcs       []Func
	Exports     []Export
	MemoryPages int
}

// Encode returns the module's binary form.
func (m Module) Encode() []byte {
	out := []byte("\x00asm\x01\x00\x00\x00")
	var s []byte
	s = uleb(nil, len(m.Types))
	for _, t := range m.Types {
		s = append(s, 0x60)
		s = vec(s, t.Params)
		s = vec(s, t.Results)
	}
	out = section(out, 1, s)
	if len(m.Imports) > 0 {
		s = uleb(nil, len(m.Imports))
		for _, im := range m.Imports {
			s = name(s, im.Module)
			s = name(s, im.Name)
			s = append(s, 0)
			s = uleb(s, im.Type)
		}
		out = section(out, 2, s)
	}
	s = uleb(nil, len(m.Funcs))
	for _, f := range m.Funcs {
		s = uleb(s, f.Type)
	}
	out = section(out, 3, s)
	if m.MemoryPages > 0 {
		out = section(out, 5, uleb([]byte{1, 0}, m.MemoryPages))
	}
	s = uleb(nil, len(m.Exports))
	for _, e := range m.Exports {
		s = name(s, e.Name)
		if e.Memory {
			s = append(s, 2, 0)
			continue
		}
		s = append(s, 0)
		s = uleb(s, e.Func)
	}
	out = section(out, 7, s)
	s = uleb(nil, len(m.Funcs))
	for _, f := range m.Funcs {
		var body []byte
		if f.Locals > 0 {
			body = uleb([]byte{1}, f.Locals)
			body = append(body, I32)
		} else {
			body = []byte{0}
		}
		body = append(body, f.Body...)
		body = append(body, 0x0b)
		s = uleb(s, len(body))
		s = append(s, body...)
	}
	return section(out, 10, s)
}

// ABI returns a module that follows ABI v1 (validators/ABI.md) in shape:
// memory of one page, pawl_abi_version returning 1, pawl_alloc returning
// 1024, and pawl_validate with the given locals and body, which must leave
// an i64 (the result's pointer and length) on the stack.
func ABI(locals int, validate []byte) Module {
	return Module{
		Types: []FuncType{
			{Results: []byte{I32}},
			{Params: []byte{I32}, Results: []byte{I32}},
			{Params: []byte{I32, I32}, Results: []byte{I64}},
		},
		Funcs: []Func{
			{Type: 0, Body: I32Const(nil, 1)},
			{Type: 1, Body: I32Const(nil, 1024)},
			{Type: 2, Locals: locals, Body: validate},
		},
		Exports: []Export{
			{Name: "pawl_abi_version", Func: 0},
			{Name: "pawl_alloc", Func: 1},
			{Name: "pawl_validate", Func: 2},
			{Name: "memory", Memory: true},
		},
		MemoryPages: 1,
	}
}

// Bomb returns an ABI-shaped module whose pawl_validate declares locals
// i32 locals and nests loops loops; the innermost adds one to every local
// and loops while the first parameter is not zero. wazero's optimizing
// compiler takes time that grows with locals times loops (each loop header
// joins every local's value), so a few KiB keep it busy for long.
func Bomb(locals, loops int) []byte { return Bombs(1, locals, loops).Encode() }

// Bombs is Bomb with funcs copies of its pawl_validate (the first one
// exported), so that compiling it takes funcs times as long.
func Bombs(funcs, locals, loops int) Module {
	var body []byte
	for range loops {
		body = append(body, 0x03, 0x40) // loop (no result)
	}
	for i := range locals {
		idx := 2 + i // after the two parameters
		body = LocalGet(body, idx)
		body = I32Const(body, 1)
		body = append(body, 0x6a) // i32.add
		body = append(body, 0x21) // local.set
		body = uleb(body, idx)
	}
	for d := range loops {
		body = LocalGet(body, 0)
		body = append(body, 0x0d)              // br_if
		body = uleb(body, min(d%2, loops-1-d)) // to this loop or the one around it
		body = append(body, 0x0b)              // end
	}
	body = append(body, 0x42, 0x00) // i64.const 0
	m := ABI(locals, body)
	for range funcs - 1 {
		m.Funcs = append(m.Funcs, m.Funcs[2])
	}
	return m
}

// Shape is a control-flow shape of Branchy's function.
type Shape int

// The shapes of Branchy. Each says how many blocks (control constructs,
// else, br_if and br_table targets, as validators/host counts them) n of
// it make.
const (
	// Diamonds is n if/else/end in a row, each setting a local: 2n blocks.
	Diamonds Shape = iota
	// NestedIfs is n ifs nested in one another: n blocks.
	NestedIfs
	// BrIfs is one block that n br_if leave: n+1 blocks.
	BrIfs
	// BrTable is n nested blocks and one br_table with a target in each:
	// 2n blocks.
	BrTable
)

// Branchy returns an ABI-shaped module whose pawl_validate declares locals
// i32 locals, has n of shape s, and then adds one to every local. wazero's
// optimizing compiler takes time that grows with the blocks squared times
// the locals joined where they meet, and memory with blocks times locals.
func Branchy(s Shape, locals, n int) []byte {
	var body []byte
	test := LocalGet(nil, 0) // branch on the first parameter
	switch s {
	case Diamonds:
		for i := range n {
			body = append(append(body, test...), 0x04, 0x40) // if
			if locals > 0 {
				body = I32Const(body, 1)
				body = uleb(append(body, 0x21), 2+i%locals) // local.set
			}
			body = append(body, 0x05, 0x0b) // else, end
		}
	case NestedIfs:
		for range n {
			body = append(append(body, test...), 0x04, 0x40)
		}
		for range n {
			body = append(body, 0x0b)
		}
	case BrIfs:
		body = append(body, 0x02, 0x40) // block
		for range n {
			body = append(append(body, test...), 0x0d, 0x00) // br_if 0
		}
		body = append(body, 0x0b)
	case BrTable:
		for range n {
			body = append(body, 0x02, 0x40)
		}
		body = append(append(body, test...), 0x0e) // br_table
		body = uleb(body, n-1)
		for i := range n {
			body = uleb(body, i)
		}
		for range n {
			body = append(body, 0x0b)
		}
	}
	for i := range locals {
		idx := 2 + i
		body = LocalGet(body, idx)
		body = I32Const(body, 1)
		body = append(body, 0x6a, 0x21) // i32.add, local.set
		body = uleb(body, idx)
	}
	body = append(body, 0x42, 0x00) // i64.const 0
	return ABI(locals, body).Encode()
}

// WithCustom returns wasm with a custom section holding tag appended: the
// same code under another digest.
func WithCustom(wasm []byte, tag string) []byte {
	return section(append([]byte(nil), wasm...), 0, name(name(nil, "pawl-test"), tag))
}

// LocalGet appends local.get idx.
func LocalGet(b []byte, idx int) []byte { return uleb(append(b, 0x20), idx) }

// I32Const appends i32.const v (v >= 0).
func I32Const(b []byte, v int) []byte {
	b = append(b, 0x41)
	// Signed LEB128 of a non-negative value.
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func section(out []byte, id byte, body []byte) []byte {
	out = append(out, id)
	out = uleb(out, len(body))
	return append(out, body...)
}

func vec(b, items []byte) []byte { return append(uleb(b, len(items)), items...) }

func name(b []byte, s string) []byte { return append(uleb(b, len(s)), s...) }

func uleb(b []byte, v int) []byte {
	u := uint64(v)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}
