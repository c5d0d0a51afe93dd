package host_test

import (
	"context"
	"fmt"
	"os"
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
// the routing example in each language: load (compile, or read the
// compilation cache), instantiate, validate. "cold" starts each iteration
// with an empty cache directory, "warm" with one a previous runtime
// filled.
func BenchmarkRoutingFirstCall(b *testing.B) {
	ctx := context.Background()
	in := host.Input{Config: routingTable(2), MediaType: "application/json"}
	for _, m := range routingModules(b) {
		var loading, validating time.Duration
		first := func(b *testing.B, dir string) {
			began := time.Now()
			r, err := host.New(ctx, host.WithCacheDir(dir))
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close(ctx)
			v, err := r.Load(ctx, host.Digest(m.wasm), m.wasm)
			if err != nil {
				b.Fatal(err)
			}
			loaded := time.Now()
			if _, err := v.Validate(ctx, in); err != nil {
				b.Fatal(err)
			}
			loading += loaded.Sub(began)
			validating += time.Since(loaded)
		}
		report := func(b *testing.B, n int) {
			b.ReportMetric(float64(len(m.wasm))/1024, "module-KiB")
			b.ReportMetric(ms(loading)/float64(n), "load-ms")
			b.ReportMetric(ms(validating)/float64(n), "first-validate-ms")
			b.ReportMetric(ms(loading+validating)/float64(n), "first-ms")
			loading, validating = 0, 0
		}
		b.Run(m.lang+"/cold", func(b *testing.B) {
			n := 0
			defer func() { report(b, n) }()
			for b.Loop() {
				n++
				b.StopTimer()
				dir, err := os.MkdirTemp("", "pawl-cold")
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				first(b, dir)
				b.StopTimer()
				os.RemoveAll(dir)
				b.StartTimer()
			}
		})
		b.Run(m.lang+"/warm", func(b *testing.B) {
			dir := b.TempDir()
			first(b, dir)
			loading, validating = 0, 0
			n := 0
			for b.Loop() {
				n++
				first(b, dir)
			}
			report(b, n)
		})
	}
}
