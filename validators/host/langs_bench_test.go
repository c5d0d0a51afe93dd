package host_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/validators/host"
)

// routingModules builds the routing example in each language, as
// validators/examples/parity checks they agree.
func routingModules(b *testing.B) []struct {
	lang string
	wasm []byte
} {
	return []struct {
		lang string
		wasm []byte
	}{
		{"go", wasmbuild.Build(b, "routing")},
		{"rust", wasmbuild.BuildRust(b, "routing-rust")},
		{"assemblyscript", wasmbuild.BuildAssemblyScript(b, "routing-as")},
	}
}

// routingTable returns a valid routing table of n upstreams.
func routingTable(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"upstreams":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		w := 100 / n
		if i == 0 {
			w += 100 % n
		}
		fmt.Fprintf(&b, `{"host":"upstream-%d.internal:443","weight":%d,"token":"token-of-upstream-%04d"}`, i, w, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkRoutingLanguages measures validations per second of the
// routing example built from Go, Rust and AssemblyScript, on the same
// tables (2 and 100 upstreams), on all cores (one instance per core).
func BenchmarkRoutingLanguages(b *testing.B) {
	ctx := context.Background()
	for _, m := range routingModules(b) {
		r := newRuntime(b)
		v, err := r.Load(ctx, host.Digest(m.wasm), m.wasm)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{2, 100} {
			in := host.Input{Config: routingTable(n), MediaType: "application/json"}
			b.Run(fmt.Sprintf("%s/%dupstreams", m.lang, n), func(b *testing.B) {
				if res, err := v.Validate(ctx, in); err != nil || !res.Valid {
					b.Fatalf("the table is not valid: %+v, %v", res, err)
				}
				b.SetBytes(int64(len(in.Config)))
				b.ReportAllocs()
				b.ReportMetric(float64(len(m.wasm))/1024, "module-KiB")
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := v.Validate(ctx, in); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "validations/s")
			})
		}
		_ = v.Close(ctx)
	}
}

// BenchmarkRoutingFirstCall measures a new runtime's first validation of
// the routing example in each language, as BenchmarkFirstCall does.
func BenchmarkRoutingFirstCall(b *testing.B) {
	in := host.Input{Config: routingTable(2), MediaType: "application/json"}
	for _, m := range routingModules(b) {
		benchFirstCall(b, m.lang+"/", m.wasm, in)
	}
}
