package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/internal/testkit/wasmgen"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/validators/host"
)

// TestCompileBombUploadIsRefused uploads modules of a few KiB that kept
// wazero's compiler busy for seconds to minutes: each is refused before it
// is compiled, with ResourceExhausted naming the limit and its flag, and
// nothing is stored.
func TestCompileBombUploadIsRefused(t *testing.T) {
	srv := testserver.Start(t)
	vs := newValidators(t, srv)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		wasm []byte
		msg  string
	}{
		{"nested loops", wasmgen.Bomb(20, 2000), "function 2 has 2000 nested loops; the limit is 32 (pawld --validator-max-loop-depth)"},
		{"locals in loops", wasmgen.Bomb(2000, 30), "the limit is 10000 (pawld --validator-max-loop-joins)"},
		{"locals", wasmgen.Bomb(6000, 1), "function 2 has 6000 locals per function; the limit is 5000 (pawld --validator-max-function-locals)"},
		{"if/else diamonds", wasmgen.Branchy(wasmgen.Diamonds, 2, 40_000), "function 2 has 80000 blocks (block, loop, if, else, br_if and br_table targets); the limit is 10500 (pawld --validator-max-blocks)"},
		{"locals across diamonds", wasmgen.Branchy(wasmgen.Diamonds, 5000, 1000), "function 2 has 10004000 block joins (blocks times locals); the limit is 110000 (pawld --validator-max-block-joins)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			began := time.Now()
			_, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: c.wasm}))
			if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("Upload = %v; want resource_exhausted saying %q", err, c.msg)
			}
			if took := time.Since(began); took > 10*time.Second {
				t.Fatalf("refusing took %s", took)
			}
		})
	}
	if s := srv.Server.ValidatorStats(); s.Compiles != 0 {
		t.Fatalf("refused modules were compiled: %+v", s)
	}
	list, err := vs.ListValidators(ctx, connect.NewRequest(&pawlv1.ListValidatorsRequest{}))
	if err != nil || len(list.Msg.GetValidators()) != 0 {
		t.Fatalf("refused uploads were stored: %v, %v", list, err)
	}
}

// TestCancelledUploadStopsItsCompilation uploads, twice at once, a module
// within the limits that takes a minute of CPU to compile: the second
// upload shares the first's compilation, and when both clients cancel,
// pawld stops compiling.
func TestCancelledUploadStopsItsCompilation(t *testing.T) {
	srv := testserver.Start(t)
	vs := newValidators(t, srv)
	wasm := wasmgen.Bombs(1000, 310, 32).Encode()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasm}))
		}()
	}
	wasmbuild.AwaitStats(t, srv.Server.ValidatorStats, "compiling for both uploads", func(s host.Stats) bool { return s.CompileWaiters == 2 })
	if s := srv.Server.ValidatorStats(); s.Compiles != 1 {
		t.Fatalf("two uploads of one module: %+v; want one compilation", s)
	}
	cancel()
	wg.Wait()
	for _, err := range errs {
		if connect.CodeOf(err) != connect.CodeCanceled {
			t.Fatalf("Upload after its cancel = %v", err)
		}
	}
	idle := wasmbuild.AwaitStats(t, srv.Server.ValidatorStats, "idle", func(s host.Stats) bool { return s.Compiling == 0 })
	// Within one function's compile time: under a second without -race.
	t.Logf("pawld stopped compiling %s after the clients went", idle)
	if idle > 20*time.Second {
		t.Fatalf("pawld compiled on for %s after the clients went", idle)
	}
}

// TestConcurrentHostileValidations runs 50 validations at once of modules
// that allocate without end or loop forever: each is stopped at its limit
// or refused for the memory budget, naming its flag, and never more
// instances exist than the budget allows.
func TestConcurrentHostileValidations(t *testing.T) {
	const memory, instances = 32 << 20, 2
	srv := testserver.Start(t, server.WithValidatorMemoryLimit(memory), server.WithValidatorMemoryBudget(instances*memory),
		server.WithValidatorTimeout(time.Second))
	vs := newValidators(t, srv)
	digests := []string{upload(t, vs, "hostile/membomb"), upload(t, vs, "hostile/loop")}
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = validate(vs, digests[i%2], "{}")
		}()
	}
	wg.Wait()
	counts := map[string]int{}
	for i, err := range errs {
		switch msg := err.Error(); {
		case connect.CodeOf(err) == connect.CodeResourceExhausted && strings.Contains(msg, "needed more than 32 MiB"):
			counts["memory limit"]++
		case connect.CodeOf(err) == connect.CodeDeadlineExceeded && strings.Contains(msg, "ran longer than the 1s limit"):
			counts["time limit"]++
		case connect.CodeOf(err) == connect.CodeResourceExhausted && strings.Contains(msg, "pawld --validator-memory-budget"):
			counts["memory budget"]++
		default:
			t.Errorf("validation %d = %v", i, err)
		}
	}
	s := srv.Server.ValidatorStats()
	t.Logf("outcomes %v, %+v", counts, s)
	if s.PeakInstances > instances {
		t.Fatalf("%d validator instances existed at once; the budget allows %d", s.PeakInstances, instances)
	}
	if ran := counts["memory limit"] + counts["time limit"]; ran < instances {
		t.Fatalf("outcomes %v: at least the first %d validations should have run", counts, instances)
	}
	good := upload(t, vs, "routing")
	if res, err := validate(vs, good, `{"upstreams":[{"host":"a","weight":100}]}`); err != nil || !res.GetValid() {
		t.Fatalf("a good validation after the hostile ones: %v, %v", res, err)
	}
}
