// Package wasmcheck reads the sections of a WebAssembly binary that decide
// whether it is worth compiling: the types, imports, functions, exports and
// the shape of the code (how many functions, how many locals, how many
// bytes), without compiling or validating instructions. It refuses a module
// over its Limits as soon as it reads the count that breaks one, so its work
// and memory are linear in the bytes it is given and it allocates nothing in
// proportion to a count it has not checked against them.
//
// It is the first gate of validators/host: wazero's optimizing compiler
// takes time that grows faster than linearly with the locals of a function
// times its blocks, so a module of a few KiB can keep it busy for minutes,
// and it cannot be interrupted within a function. Scan is what keeps such a
// module from reaching it.
package wasmcheck

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrMalformed means the bytes are not a WebAssembly binary this reader
// understands: a bad magic number or version, a section that runs past the
// end, an unknown type or kind.
var ErrMalformed = errors.New("wasmcheck: malformed module")

// ErrLimit means the module is over one of the Limits; the error is a
// *LimitError.
var ErrLimit = errors.New("wasmcheck: module over a limit")

// Limit names a structural limit, as LimitError.Limit reports it.
type Limit string

// The limits Scan enforces.
const (
	// LimitFunctions bounds the functions the module defines.
	LimitFunctions Limit = "functions"
	// LimitFunctionLocals bounds the locals one function declares.
	LimitFunctionLocals Limit = "locals per function"
	// LimitLocals bounds the locals of all functions together.
	LimitLocals Limit = "locals"
	// LimitFunctionBytes bounds one function's body.
	LimitFunctionBytes Limit = "function body bytes"
	// LimitCodeBytes bounds the code section.
	LimitCodeBytes Limit = "code section bytes"
	// LimitLoopDepth bounds how deeply loops nest in one function.
	LimitLoopDepth Limit = "nested loops"
	// LimitLoopJoins bounds one function's loops times its locals and
	// parameters: at each loop the compiler joins every local's value.
	LimitLoopJoins Limit = "loop joins (loops times locals)"
	// LimitBlocks bounds one function's blocks: its control constructs,
	// else, br_if and br_table targets. The compiler's time grows with
	// their square.
	LimitBlocks Limit = "blocks (block, loop, if, else, br_if and br_table targets)"
	// LimitBlockJoins bounds one function's blocks times its locals and
	// parameters: where control flow joins, the compiler joins every
	// local's value.
	LimitBlockJoins Limit = "block joins (blocks times locals)"
)

// Limits bound the shape of a module. A zero field means no limit.
type Limits struct {
	// Functions is the most functions the module may define (imports do
	// not count).
	Functions int
	// FunctionLocals is the most locals one function may declare (its
	// parameters do not count).
	FunctionLocals int
	// Locals is the most locals all functions may declare together.
	Locals int
	// FunctionBytes is the largest function body, in bytes.
	FunctionBytes int
	// CodeBytes is the largest code section, in bytes.
	CodeBytes int
	// LoopDepth is the deepest nesting of loops in one function.
	LoopDepth int
	// LoopJoins is the most loops times locals (parameters included) of
	// one function.
	LoopJoins int
	// Blocks is the most blocks of one function: control constructs
	// (block, loop, if, try, try_table), else, br_if, and each target of
	// br_table, its default included.
	Blocks int
	// BlockJoins is the most blocks times locals (parameters included) of
	// one function.
	BlockJoins int
}

// LimitError says which limit a module is over. It matches ErrLimit.
type LimitError struct {
	// Limit is the limit that was hit.
	Limit Limit
	// Max is its value.
	Max int
	// Got is what the module has, or at least has (Scan stops counting at
	// the limit's first breach).
	Got uint64
	// Where says which function, for a per-function limit ("function
	// 12"); empty otherwise.
	Where string
}

func (e *LimitError) Error() string {
	where := "the module"
	if e.Where != "" {
		where = e.Where
	}
	return fmt.Sprintf("%s has %d %s; the limit is %d", where, e.Got, e.Limit, e.Max)
}

// Is reports whether target is ErrLimit.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// ValueType is a WebAssembly value type, by its binary encoding.
type ValueType byte

// Value types.
const (
	I32       ValueType = 0x7f
	I64       ValueType = 0x7e
	F32       ValueType = 0x7d
	F64       ValueType = 0x7c
	V128      ValueType = 0x7b
	FuncRef   ValueType = 0x70
	ExternRef ValueType = 0x6f
)

func (t ValueType) String() string {
	switch t {
	case I32:
		return "i32"
	case I64:
		return "i64"
	case F32:
		return "f32"
	case F64:
		return "f64"
	case V128:
		return "v128"
	case FuncRef:
		return "funcref"
	case ExternRef:
		return "externref"
	}
	return fmt.Sprintf("0x%02x", byte(t))
}

// FuncType is a function signature.
type FuncType struct {
	Params, Results []ValueType
}

// Kind is what an import or export is.
type Kind byte

// Import and export kinds.
const (
	KindFunc   Kind = 0
	KindTable  Kind = 1
	KindMemory Kind = 2
	KindGlobal Kind = 3
	KindTag    Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindFunc:
		return "function"
	case KindTable:
		return "table"
	case KindMemory:
		return "memory"
	case KindGlobal:
		return "global"
	case KindTag:
		return "tag"
	}
	return fmt.Sprintf("kind 0x%02x", byte(k))
}

// Import is one import.
type Import struct {
	Module, Name string
	Kind         Kind
	// Type is the signature of a function import.
	Type FuncType
}

// Export is one export.
type Export struct {
	Name string
	Kind Kind
	// Type is the signature of an exported function.
	Type FuncType
}

// Module is what Scan read.
type Module struct {
	Imports []Import
	Exports []Export
	// Functions is how many functions the module defines.
	Functions int
	// Locals is how many locals they declare together.
	Locals uint64
	// MaxFunctionLocals and MaxFunctionBytes are the largest function's
	// locals and body size.
	MaxFunctionLocals uint64
	MaxFunctionBytes  int
	// CodeBytes is the code section's size.
	CodeBytes int
	// MaxLoopDepth and MaxLoopJoins are the deepest loop nesting and the
	// most loops times locals of one function.
	MaxLoopDepth, MaxLoopJoins int
	// MaxBlocks and MaxBlockJoins are the most blocks and the most blocks
	// times locals of one function.
	MaxBlocks, MaxBlockJoins int
}

// Section IDs, in the order the binary format requires (custom sections
// may appear anywhere; the data count section sits before the code).
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secExport    = 7
	secCode      = 10
	secDataCount = 12
	secTag       = 13
)

// sectionOrder places each known section in the order the binary format
// requires.
var sectionOrder = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

// Scan reads wasm's header and sections against lim. It does not validate
// instructions: a module it accepts may still fail to compile.
func Scan(wasm []byte, lim Limits) (*Module, error) {
	r := &reader{b: wasm}
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, fmt.Errorf("%w: no WebAssembly magic number (\\0asm) at the start", ErrMalformed)
	}
	if v := wasm[4:8]; v[0] != 1 || v[1] != 0 || v[2] != 0 || v[3] != 0 {
		return nil, fmt.Errorf("%w: binary format version %d, want 1", ErrMalformed, uint32(v[0])|uint32(v[1])<<8|uint32(v[2])<<16|uint32(v[3])<<24)
	}
	r.pos = 8
	s := &scan{lim: lim, m: &Module{}}
	last := 0
	for r.pos < len(r.b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("section %d: %w", id, err)
		}
		body, err := r.bytes(int(size))
		if err != nil {
			return nil, fmt.Errorf("section %d: %w", id, err)
		}
		if id != secCustom {
			order, known := sectionOrder[id]
			if !known {
				return nil, fmt.Errorf("%w: unknown section %d", ErrMalformed, id)
			}
			if order <= last {
				return nil, fmt.Errorf("%w: section %d is out of order or repeated", ErrMalformed, id)
			}
			last = order
		}
		if err := s.section(id, &reader{b: body}); err != nil {
			return nil, err
		}
	}
	if s.m.Functions != s.codes {
		return nil, fmt.Errorf("%w: %d functions declared but %d bodies in the code section", ErrMalformed, s.m.Functions, s.codes)
	}
	return s.m, nil
}

// scan holds what one Scan has read so far.
type scan struct {
	lim       Limits
	m         *Module
	types     []FuncType
	funcTypes []FuncType // imported functions first, then defined ones
	codes     int
}

func (s *scan) section(id byte, r *reader) error {
	var err error
	switch id {
	case secType:
		err = s.typeSection(r)
	case secImport:
		err = s.importSection(r)
	case secFunction:
		err = s.functionSection(r)
	case secExport:
		err = s.exportSection(r)
	case secCode:
		err = s.codeSection(r)
	default:
		return nil // checked by the compiler, linear in its size
	}
	if err != nil {
		return err
	}
	if r.pos != len(r.b) {
		return fmt.Errorf("%w: section %d has %d bytes left over", ErrMalformed, id, len(r.b)-r.pos)
	}
	return nil
}

func (s *scan) typeSection(r *reader) error {
	n, err := r.count(1)
	if err != nil {
		return fmt.Errorf("type section: %w", err)
	}
	s.types = make([]FuncType, 0, n)
	for i := range n {
		form, err := r.byte()
		if err != nil {
			return fmt.Errorf("type %d: %w", i, err)
		}
		if form != 0x60 {
			return fmt.Errorf("%w: type %d has form 0x%02x, want a function type (0x60)", ErrMalformed, i, form)
		}
		var t FuncType
		if t.Params, err = r.valueTypes(); err != nil {
			return fmt.Errorf("type %d params: %w", i, err)
		}
		if t.Results, err = r.valueTypes(); err != nil {
			return fmt.Errorf("type %d results: %w", i, err)
		}
		s.types = append(s.types, t)
	}
	return nil
}

func (s *scan) importSection(r *reader) error {
	n, err := r.count(4)
	if err != nil {
		return fmt.Errorf("import section: %w", err)
	}
	s.m.Imports = make([]Import, 0, n)
	for i := range n {
		var im Import
		if im.Module, err = r.name(); err != nil {
			return fmt.Errorf("import %d: %w", i, err)
		}
		if im.Name, err = r.name(); err != nil {
			return fmt.Errorf("import %d: %w", i, err)
		}
		kind, err := r.byte()
		if err != nil {
			return fmt.Errorf("import %d: %w", i, err)
		}
		im.Kind = Kind(kind)
		switch im.Kind {
		case KindFunc:
			if im.Type, err = s.typeAt(r); err != nil {
				return fmt.Errorf("import %d: %w", i, err)
			}
			s.funcTypes = append(s.funcTypes, im.Type)
		case KindTable:
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case KindMemory:
			err = r.limits()
		case KindGlobal:
			if _, err = r.valueType(); err == nil {
				_, err = r.byte()
			}
		case KindTag:
			if _, err = r.byte(); err == nil {
				_, err = s.typeAt(r)
			}
		default:
			return fmt.Errorf("%w: import %d has unknown kind 0x%02x", ErrMalformed, i, kind)
		}
		if err != nil {
			return fmt.Errorf("import %d (%s.%s): %w", i, im.Module, im.Name, err)
		}
		s.m.Imports = append(s.m.Imports, im)
	}
	return nil
}

func (s *scan) functionSection(r *reader) error {
	n, err := r.count(1)
	if err != nil {
		return fmt.Errorf("function section: %w", err)
	}
	if s.lim.Functions > 0 && n > s.lim.Functions {
		return &LimitError{Limit: LimitFunctions, Max: s.lim.Functions, Got: uint64(n)}
	}
	s.m.Functions = n
	for i := range n {
		t, err := s.typeAt(r)
		if err != nil {
			return fmt.Errorf("function %d: %w", i, err)
		}
		s.funcTypes = append(s.funcTypes, t)
	}
	return nil
}

func (s *scan) exportSection(r *reader) error {
	n, err := r.count(3)
	if err != nil {
		return fmt.Errorf("export section: %w", err)
	}
	s.m.Exports = make([]Export, 0, n)
	for i := range n {
		var ex Export
		if ex.Name, err = r.name(); err != nil {
			return fmt.Errorf("export %d: %w", i, err)
		}
		kind, err := r.byte()
		if err != nil {
			return fmt.Errorf("export %d: %w", i, err)
		}
		ex.Kind = Kind(kind)
		if ex.Kind > KindTag {
			return fmt.Errorf("%w: export %d (%s) has unknown kind 0x%02x", ErrMalformed, i, ex.Name, kind)
		}
		idx, err := r.u32()
		if err != nil {
			return fmt.Errorf("export %d (%s): %w", i, ex.Name, err)
		}
		if ex.Kind == KindFunc {
			if uint64(idx) >= uint64(len(s.funcTypes)) {
				return fmt.Errorf("%w: export %s names function %d; the module has %d", ErrMalformed, ex.Name, idx, len(s.funcTypes))
			}
			ex.Type = s.funcTypes[idx]
		}
		s.m.Exports = append(s.m.Exports, ex)
	}
	return nil
}

func (s *scan) codeSection(r *reader) error {
	lim := s.lim
	s.m.CodeBytes = len(r.b)
	if lim.CodeBytes > 0 && len(r.b) > lim.CodeBytes {
		return &LimitError{Limit: LimitCodeBytes, Max: lim.CodeBytes, Got: uint64(len(r.b))}
	}
	n, err := r.count(2)
	if err != nil {
		return fmt.Errorf("code section: %w", err)
	}
	if n != s.m.Functions {
		return fmt.Errorf("%w: %d functions declared but %d bodies in the code section", ErrMalformed, s.m.Functions, n)
	}
	s.codes = n
	for i := range n {
		size, err := r.u32()
		if err != nil {
			return fmt.Errorf("function %d: %w", i, err)
		}
		if lim.FunctionBytes > 0 && uint64(size) > uint64(lim.FunctionBytes) {
			return &LimitError{Limit: LimitFunctionBytes, Max: lim.FunctionBytes, Got: uint64(size), Where: fmt.Sprintf("function %d", i)}
		}
		b, err := r.bytes(int(size))
		if err != nil {
			return fmt.Errorf("function %d: %w", i, err)
		}
		s.m.MaxFunctionBytes = max(s.m.MaxFunctionBytes, len(b))
		if err := s.function(&reader{b: b}, i); err != nil {
			return err
		}
	}
	return nil
}

// function reads function fn's body and checks its shape against the
// limits.
func (s *scan) function(r *reader, fn int) error {
	locals, err := s.locals(r, fn)
	if err != nil {
		return err
	}
	s.m.MaxFunctionLocals = max(s.m.MaxFunctionLocals, locals)
	sh, err := body(r)
	if err != nil {
		return fmt.Errorf("function %d: %w", fn, err)
	}
	vars := locals + uint64(len(s.funcTypes[len(s.funcTypes)-s.m.Functions+fn].Params))
	loopJoins, blockJoins := uint64(sh.loops)*vars, uint64(sh.blocks)*vars
	for _, c := range []struct {
		limit    Limit
		max      int
		got      uint64
		observed *int
	}{
		{LimitLoopDepth, s.lim.LoopDepth, uint64(sh.depth), &s.m.MaxLoopDepth},
		{LimitLoopJoins, s.lim.LoopJoins, loopJoins, &s.m.MaxLoopJoins},
		{LimitBlocks, s.lim.Blocks, uint64(sh.blocks), &s.m.MaxBlocks},
		{LimitBlockJoins, s.lim.BlockJoins, blockJoins, &s.m.MaxBlockJoins},
	} {
		if c.max > 0 && c.got > uint64(c.max) {
			return &LimitError{Limit: c.limit, Max: c.max, Got: c.got, Where: fmt.Sprintf("function %d", fn)}
		}
		*c.observed = max(*c.observed, int(min(c.got, uint64(1)<<62)))
	}
	return nil
}

// locals reads a function body's local declarations and counts them
// against the limits; the rest of the body is instructions.
func (s *scan) locals(r *reader, fn int) (uint64, error) {
	groups, err := r.count(2)
	if err != nil {
		return 0, fmt.Errorf("function %d locals: %w", fn, err)
	}
	var locals uint64
	for range groups {
		n, err := r.u32()
		if err != nil {
			return 0, fmt.Errorf("function %d locals: %w", fn, err)
		}
		if _, err := r.valueType(); err != nil {
			return 0, fmt.Errorf("function %d locals: %w", fn, err)
		}
		locals += uint64(n) // at most 2^32 groups of 2^32: no overflow in uint64
		if s.lim.FunctionLocals > 0 && locals > uint64(s.lim.FunctionLocals) {
			return 0, &LimitError{Limit: LimitFunctionLocals, Max: s.lim.FunctionLocals, Got: locals, Where: fmt.Sprintf("function %d", fn)}
		}
		if s.lim.Locals > 0 && s.m.Locals+locals > uint64(s.lim.Locals) {
			return 0, &LimitError{Limit: LimitLocals, Max: s.lim.Locals, Got: s.m.Locals + locals}
		}
	}
	s.m.Locals += locals
	return locals, nil
}

// typeAt reads a type index and returns the type.
func (s *scan) typeAt(r *reader) (FuncType, error) {
	idx, err := r.u32()
	if err != nil {
		return FuncType{}, err
	}
	if uint64(idx) >= uint64(len(s.types)) {
		return FuncType{}, fmt.Errorf("%w: type index %d; the module has %d types", ErrMalformed, idx, len(s.types))
	}
	return s.types[idx], nil
}

// reader reads the binary format's primitives from b, never past its end.
type reader struct {
	b   []byte
	pos int
}

var errEOF = fmt.Errorf("%w: unexpected end", ErrMalformed)

func (r *reader) byte() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, errEOF
	}
	c := r.b[r.pos]
	r.pos++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.pos {
		return nil, errEOF
	}
	b := r.b[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// u32 reads an unsigned LEB128 of at most 32 bits (5 bytes).
func (r *reader) u32() (uint32, error) {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c > 0x0f {
			return 0, fmt.Errorf("%w: integer too large for 32 bits", ErrMalformed)
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: integer longer than 5 bytes", ErrMalformed)
}

// count reads a vector's length, each element of which takes at least
// minSize bytes: a count the rest of the input cannot hold is refused
// before anything is allocated for it.
func (r *reader) count(minSize int) (int, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(minSize) > uint64(len(r.b)-r.pos) {
		return 0, fmt.Errorf("%w: %d elements cannot fit in the %d bytes left", ErrMalformed, n, len(r.b)-r.pos)
	}
	return int(n), nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(int(n))
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%w: a name is not UTF-8", ErrMalformed)
	}
	return string(b), nil
}

func (r *reader) valueType() (ValueType, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	switch t := ValueType(c); t {
	case I32, I64, F32, F64, V128, FuncRef, ExternRef:
		return t, nil
	}
	return 0, fmt.Errorf("%w: unknown value type 0x%02x", ErrMalformed, c)
}

func (r *reader) valueTypes() ([]ValueType, error) {
	n, err := r.count(1)
	if err != nil {
		return nil, err
	}
	ts := make([]ValueType, n)
	for i := range ts {
		if ts[i], err = r.valueType(); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// limits reads a table's or memory's limits: a flag, a minimum and, with
// flag bit 0, a maximum (bit 1 marks shared memory).
func (r *reader) limits() error {
	flag, err := r.byte()
	if err != nil {
		return err
	}
	if flag > 3 {
		return fmt.Errorf("%w: limits flag 0x%02x (64-bit memories are not supported)", ErrMalformed, flag)
	}
	if _, err := r.u32(); err != nil {
		return err
	}
	if flag&1 != 0 {
		_, err = r.u32()
	}
	return err
}
