package wasmcheck

import "fmt"

// shape is what body measures of one function's instructions.
type shape struct {
	// loops is how many loops there are, depth how deeply they nest.
	loops, depth int
	// blocks is how many places control flow splits or joins: the
	// control constructs (block, loop, if, try, try_table), else, br_if
	// and each target of br_table, its default included. Each makes a
	// basic block or an edge of the compiled code.
	blocks int
}

// body walks one function's instructions, after its locals, reading every
// immediate, and measures its control flow. Instructions are not validated
// (the compiler does that); an opcode this reader does not know is
// refused, as the compiler would.
func body(r *reader) (shape, error) {
	var sh shape
	// stack holds, for each open block, whether it is a loop.
	var stack []bool
	open := 0 // open loops
	for {
		at := r.pos
		op, err := r.byte()
		if err != nil {
			return shape{}, err
		}
		switch {
		case op == 0x02 || op == 0x04 || op == 0x06: // block, if, try
			err = r.blockType()
			stack = append(stack, false)
			sh.blocks++
		case op == 0x03: // loop
			err = r.blockType()
			stack = append(stack, true)
			sh.blocks++
			sh.loops++
			open++
			sh.depth = max(sh.depth, open)
		case op == 0x1f: // try_table
			if err = r.blockType(); err == nil {
				err = r.catches()
			}
			stack = append(stack, false)
			sh.blocks++
		case op == 0x05: // else
			sh.blocks++
		case op == 0x0d: // br_if
			_, err = r.u32()
			sh.blocks++
		case op == 0x0b: // end
			if len(stack) == 0 {
				if r.pos != len(r.b) {
					return shape{}, fmt.Errorf("%w: %d bytes after the function's end", ErrMalformed, len(r.b)-r.pos)
				}
				return sh, nil
			}
			if stack[len(stack)-1] {
				open--
			}
			stack = stack[:len(stack)-1]
		case op == 0x0e: // br_table
			var n int
			if n, err = r.count(1); err == nil {
				for i := 0; i <= n && err == nil; i++ {
					_, err = r.u32()
				}
				sh.blocks += n + 1
			}
		case op == 0x1c: // select t*
			_, err = r.valueTypes()
		case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
			if _, err = r.u32(); err == nil {
				_, err = r.u32()
			}
		case op >= 0x28 && op <= 0x3e: // loads and stores
			err = r.memarg()
		case op == 0x41 || op == 0x42: // i32.const, i64.const
			err = r.sleb()
		case op == 0x43: // f32.const
			_, err = r.bytes(4)
		case op == 0x44: // f64.const
			_, err = r.bytes(8)
		case op == 0xd0: // ref.null
			err = r.heapType()
		case op == 0xfc:
			err = r.prefixFC()
		case op == 0xfd:
			err = r.prefixFD()
		case op == 0xfe:
			err = r.prefixFE()
		case oneIndex[op]:
			_, err = r.u32()
		case noImmediate[op]:
		default:
			return shape{}, fmt.Errorf("%w: unknown opcode 0x%02x at byte %d of the body", ErrMalformed, op, at)
		}
		if err != nil {
			return shape{}, err
		}
	}
}

// oneIndex are the opcodes with one index or depth as immediate.
var oneIndex = [256]bool{
	0x07: true, 0x08: true, 0x09: true, // catch, throw, rethrow
	0x0c: true,                                     // br
	0x10: true, 0x12: true, 0x14: true, 0x15: true, // call, return_call, call_ref, return_call_ref
	0x18: true,                                                 // delegate
	0x20: true, 0x21: true, 0x22: true, 0x23: true, 0x24: true, // locals and globals
	0x25: true, 0x26: true, // table.get, table.set
	0x3f: true, 0x40: true, // memory.size, memory.grow
	0xd2: true, 0xd4: true, 0xd6: true, // ref.func, br_on_null, br_on_non_null
}

// noImmediate are the opcodes without immediates.
var noImmediate = func() (t [256]bool) {
	for _, op := range []byte{0x00, 0x01, 0x0a, 0x0f, 0x19, 0x1a, 0x1b, 0xd1, 0xd3, 0xd5} {
		t[op] = true
	}
	for op := 0x45; op <= 0xc4; op++ { // numeric instructions, sign extension
		t[op] = true
	}
	return t
}()

// blockType reads a block type: empty (0x40), a value type, or a type
// index as a signed 33-bit integer.
func (r *reader) blockType() error {
	if r.pos >= len(r.b) {
		return errEOF
	}
	if c := r.b[r.pos]; c == 0x40 || c >= 0x6f && c <= 0x7f {
		r.pos++ // empty, a value type, or a negative one-byte index the compiler refuses
		return nil
	}
	return r.sleb()
}

// catches reads try_table's catch clauses.
func (r *reader) catches() error {
	n, err := r.count(2)
	if err != nil {
		return err
	}
	for range n {
		kind, err := r.byte()
		if err != nil {
			return err
		}
		if kind > 3 {
			return fmt.Errorf("%w: catch clause kind 0x%02x", ErrMalformed, kind)
		}
		if kind < 2 { // catch and catch_ref name a tag
			if _, err := r.u32(); err != nil {
				return err
			}
		}
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// memarg reads a memory access's alignment (bit 6 announces a memory
// index) and offset.
func (r *reader) memarg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return r.uleb64()
}

// heapType reads ref.null's type: a reference type byte or an index.
func (r *reader) heapType() error { return r.sleb() }

// fcIndexes is how many indexes each 0xfc instruction takes: none for
// saturating truncation (0-7), data, memory, element and table indexes for
// bulk memory and tables (8-17).
var fcIndexes = [18]int{8: 2, 9: 1, 10: 2, 11: 1, 12: 2, 13: 1, 14: 2, 15: 1, 16: 1, 17: 1}

// prefixFC reads the 0xfc instructions: saturating truncation, bulk
// memory and tables.
func (r *reader) prefixFC() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	if sub >= uint32(len(fcIndexes)) {
		return fmt.Errorf("%w: unknown opcode 0xfc %d", ErrMalformed, sub)
	}
	for range fcIndexes[sub] {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// prefixFD reads the SIMD instructions.
func (r *reader) prefixFD() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11 || sub == 92 || sub == 93: // loads and stores
		return r.memarg()
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		_, err = r.bytes(16)
	case sub >= 21 && sub <= 34: // extract and replace lane
		_, err = r.byte()
	case sub >= 84 && sub <= 91: // load and store lane
		if err = r.memarg(); err == nil {
			_, err = r.byte()
		}
	case sub > 0x113:
		return fmt.Errorf("%w: unknown opcode 0xfd %d", ErrMalformed, sub)
	}
	return err
}

// prefixFE reads the atomic instructions.
func (r *reader) prefixFE() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	if sub == 3 { // atomic.fence
		_, err = r.byte()
		return err
	}
	if sub > 0x4e {
		return fmt.Errorf("%w: unknown opcode 0xfe %d", ErrMalformed, sub)
	}
	return r.memarg()
}

// sleb reads a signed LEB128 of at most 64 bits.
func (r *reader) sleb() error { return r.uleb64() }

// uleb64 reads a LEB128 of at most 10 bytes, signed or not.
func (r *reader) uleb64() error {
	for range 10 {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: integer longer than 10 bytes", ErrMalformed)
}
