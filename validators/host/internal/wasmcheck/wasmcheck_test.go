package wasmcheck_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/wasmgen"
	"github.com/pawlcfg/pawl/validators/host/internal/wasmcheck"
)

var limits = wasmcheck.Limits{Functions: 100, FunctionLocals: 1000, Locals: 10_000, FunctionBytes: 64 << 10, CodeBytes: 1 << 20, LoopDepth: 8, LoopJoins: 2000, Blocks: 100, BlockJoins: 1000}

// seeds are modules the reader must accept or refuse cleanly, each with
// what it must say.
var seeds = []struct {
	name string
	wasm []byte
	is   error // nil: accepted
}{
	{"abi module", wasmgen.Bomb(3, 2), nil},
	{"nested loops", wasmgen.Bomb(3, 9), wasmcheck.ErrLimit},
	{"many locals", wasmgen.Bomb(1001, 0), wasmcheck.ErrLimit},
	{"br_table", wasmgen.Branchy(wasmgen.BrTable, 2, 50), nil},
	{"diamonds", wasmgen.Branchy(wasmgen.Diamonds, 2, 51), wasmcheck.ErrLimit},
	{"nested ifs", wasmgen.Branchy(wasmgen.NestedIfs, 2, 101), wasmcheck.ErrLimit},
	{"br_table targets", wasmgen.Branchy(wasmgen.BrTable, 2, 51), wasmcheck.ErrLimit},
	{"locals in blocks", wasmgen.Branchy(wasmgen.BrIfs, 100, 20), wasmcheck.ErrLimit},
	{"empty", nil, wasmcheck.ErrMalformed},
	{"header only", []byte("\x00asm\x01\x00\x00\x00"), nil},
	{"version 2", []byte("\x00asm\x02\x00\x00\x00"), wasmcheck.ErrMalformed},
	{"section past the end", []byte("\x00asm\x01\x00\x00\x00\x01\x7f"), wasmcheck.ErrMalformed},
	{"huge count", []byte("\x00asm\x01\x00\x00\x00\x03\x05\xff\xff\xff\xff\x0f"), wasmcheck.ErrMalformed},
	{"truncated", wasmgen.Bomb(3, 2)[:40], wasmcheck.ErrMalformed},
}

func TestScan(t *testing.T) {
	for _, s := range seeds {
		t.Run(s.name, func(t *testing.T) {
			m, err := wasmcheck.Scan(s.wasm, limits)
			if s.is == nil && err != nil || s.is != nil && !errors.Is(err, s.is) {
				t.Fatalf("Scan = %+v, %v; want %v", m, err, s.is)
			}
		})
	}
	m, err := wasmcheck.Scan(wasmgen.Bomb(3, 2), limits)
	if err != nil || m.Functions != 3 || m.MaxFunctionLocals != 3 || m.MaxLoopDepth != 2 || m.MaxLoopJoins != 10 ||
		m.MaxBlocks != 4 || m.MaxBlockJoins != 20 || len(m.Exports) != 4 {
		t.Fatalf("Scan = %+v, %v", m, err)
	}
}

// TestScanCountsBlocks checks what each shape counts as blocks, and that
// each block limit is the one a module over it hits.
func TestScanCountsBlocks(t *testing.T) {
	for _, c := range []struct {
		name          string
		wasm          []byte
		blocks, joins int
		limits        wasmcheck.Limits
		limit         wasmcheck.Limit
	}{
		{"diamonds", wasmgen.Branchy(wasmgen.Diamonds, 3, 10), 20, 100, wasmcheck.Limits{Blocks: 19}, wasmcheck.LimitBlocks},
		{"nested ifs", wasmgen.Branchy(wasmgen.NestedIfs, 3, 10), 10, 50, wasmcheck.Limits{BlockJoins: 49}, wasmcheck.LimitBlockJoins},
		{"br_if", wasmgen.Branchy(wasmgen.BrIfs, 3, 10), 11, 55, wasmcheck.Limits{Blocks: 10}, wasmcheck.LimitBlocks},
		{"br_table", wasmgen.Branchy(wasmgen.BrTable, 0, 10), 20, 40, wasmcheck.Limits{BlockJoins: 39}, wasmcheck.LimitBlockJoins},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := wasmcheck.Scan(c.wasm, wasmcheck.Limits{Blocks: c.blocks, BlockJoins: c.joins})
			if err != nil || m.MaxBlocks != c.blocks || m.MaxBlockJoins != c.joins {
				t.Fatalf("Scan = %+v, %v; want %d blocks, %d joins", m, err, c.blocks, c.joins)
			}
			_, err = wasmcheck.Scan(c.wasm, c.limits)
			var limit *wasmcheck.LimitError
			if !errors.As(err, &limit) || limit.Limit != c.limit || limit.Where != "function 2" {
				t.Fatalf("Scan under %+v = %v; want the %s limit in function 2", c.limits, err, c.limit)
			}
		})
	}
}

// FuzzScan feeds the reader arbitrary bytes: it must never panic, and its
// time must stay linear in the input.
func FuzzScan(f *testing.F) {
	for _, s := range seeds {
		f.Add(s.wasm)
	}
	f.Fuzz(func(t *testing.T, wasm []byte) {
		began := time.Now()
		m, err := wasmcheck.Scan(wasm, limits)
		if err == nil && m == nil || err != nil && m != nil {
			t.Fatalf("Scan = %v, %v", m, err)
		}
		if err != nil && !errors.Is(err, wasmcheck.ErrMalformed) && !errors.Is(err, wasmcheck.ErrLimit) {
			t.Fatalf("Scan error %v is neither malformed nor a limit", err)
		}
		if took := time.Since(began); took > time.Second {
			t.Fatalf("Scan of %d bytes took %s", len(wasm), took)
		}
	})
}
