package wasmcheck_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/wasmgen"
	"github.com/pawlcfg/pawl/validators/host/internal/wasmcheck"
)

var limits = wasmcheck.Limits{Functions: 100, FunctionLocals: 1000, Locals: 10_000, FunctionBytes: 64 << 10, CodeBytes: 1 << 20, LoopDepth: 8, LoopJoins: 2000}

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
	if err != nil || m.Functions != 3 || m.MaxFunctionLocals != 3 || m.MaxLoopDepth != 2 || m.MaxLoopJoins != 10 || len(m.Exports) != 4 {
		t.Fatalf("Scan = %+v, %v", m, err)
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
