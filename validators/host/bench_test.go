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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var benchSchema = []byte(`{"schema":{"type":"object","required":["items"],"properties":{"items":{"type":"array","items":{
  "type":"object","required":["id","name","weight"],"additionalProperties":false,
  "properties":{"id":{"type":"integer","minimum":0},"name":{"type":"string","maxLength":64},"weight":{"type":"number","minimum":0,"maximum":100}}}}}}}`)

// document returns a valid config of about size bytes.
func document(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < size-40; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"upstream-%d","weight":%d}`, i, i, i%100)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkJSONSchema measures validations per second of the JSON Schema
// example on all cores (one instance per core).
func BenchmarkJSONSchema(b *testing.B) {
	r := newRuntime(b)
	v := load(b, r, "jsonschema")
	for _, size := range []int{1 << 10, 100 << 10} {
		doc := document(size)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			in := host.Input{Config: doc, MediaType: "application/json", Params: benchSchema}
			if res, err := v.Validate(context.Background(), in); err != nil || !res.Valid {
				b.Fatalf("benchmark document is not valid: %+v, %v", res, err)
			}
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := v.Validate(context.Background(), in); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "validations/s")
		})
	}
}

// BenchmarkFirstCall measures a new runtime's first validation of the JSON
// Schema example: load (compile, or read the compilation cache),
// instantiate, validate. "cold" starts each iteration with an empty cache
// directory, "warm" with one a previous runtime filled.
func BenchmarkFirstCall(b *testing.B) {
	benchFirstCall(b, "", wasmbuild.Build(b, "jsonschema"), host.Input{Config: document(1 << 10), Params: benchSchema})
}

// benchFirstCall runs the sub-benchmarks prefix+"cold" and prefix+"warm"
// of BenchmarkFirstCall's measure for wasm and in.
func benchFirstCall(b *testing.B, prefix string, wasm []byte, in host.Input) {
	ctx := context.Background()
	var loading, validating time.Duration
	first := func(b *testing.B, dir string) {
		began := time.Now()
		r, err := host.New(ctx, host.WithCacheDir(dir))
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close(ctx)
		v, err := r.Load(ctx, host.Digest(wasm), wasm)
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
		b.ReportMetric(float64(len(wasm))/1024, "module-KiB")
		b.ReportMetric(ms(loading)/float64(n), "load-ms")
		b.ReportMetric(ms(validating)/float64(n), "first-validate-ms")
		b.ReportMetric(ms(loading+validating)/float64(n), "first-ms")
		loading, validating = 0, 0
	}
	b.Run(prefix+"cold", func(b *testing.B) {
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
	b.Run(prefix+"warm", func(b *testing.B) {
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
