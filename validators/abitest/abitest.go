package abitest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/validators/host"
)

// DefaultLargeInput is the size of the built-in "large" input: a large
// config by the standards of hand-written ones. A server accepts configs
// up to 1 MiB by default (pawld --max-value-bytes), but Go's JSON decoder
// read half a megabyte a second in Wasm on a loaded 2-core machine: the
// check reports how long a 1 MiB config would take at the speed it
// measured.
const DefaultLargeInput = 64 << 10

// serverMaxValue is the largest config a server accepts by default (pawld
// --max-value-bytes), for the estimate of the "large" input's check.
const serverMaxValue = 1 << 20

// nestingDepth is how deeply the built-in "deep nesting" input nests
// arrays: far past what a recursive parser's stack holds unless it bounds
// its depth, in 100 KB.
const nestingDepth = 50_000

// Run checks wasm, with the cases and limits of opts, in a host runtime of
// its own that it closes before returning. The module's problems are in
// the report; the error says only that the kit could not run (bad
// options, a runtime that did not start, ctx ended).
func Run(ctx context.Context, wasm []byte, opts ...Option) (*Report, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	hostOpts := []host.Option{
		host.WithTimeout(o.timeout), host.WithMemoryLimit(o.memoryLimit), host.WithMaxOutput(o.maxOutput),
		host.WithModuleLimits(o.limits), host.WithCompileTimeout(o.compileTimeout),
		// One instance: sequential calls reuse it until one fails or the
		// kit discards it, so the kit knows which instance ran each call.
		host.WithPoolSize(1),
	}
	if o.cacheDir != "" {
		hostOpts = append(hostOpts, host.WithCacheDir(o.cacheDir))
	}
	rt, err := host.New(ctx, hostOpts...)
	if err != nil {
		return nil, fmt.Errorf("abitest: %w", err)
	}
	defer func() { _ = rt.Close(context.WithoutCancel(ctx)) }()
	k := &kit{o: o, rep: &Report{Digest: host.Digest(wasm), Size: len(wasm)}}
	const refused = "the server refuses the module at upload"
	dynamic := []string{CheckReuse, CheckIsolation, CheckAfterFailure, CheckTime, CheckMemory, CheckOutput}
	if !k.static(rt, wasm) {
		k.rep.skip(refused, append([]string{CheckLoad, CheckVersion}, dynamic...)...)
		return k.rep, nil
	}
	v, err := k.load(ctx, rt, wasm)
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		k.rep.skip(refused, dynamic...)
		return k.rep, nil
	}
	defer func() { _ = v.Close(context.WithoutCancel(ctx)) }()
	if err := k.calls(ctx, v); err != nil {
		return nil, err
	}
	return k.rep, nil
}

// kit is one Run.
type kit struct {
	o   options
	rep *Report
}

// static makes the checks of an upload that read the module without
// compiling it, and reports whether the server would go on to compile it.
func (k *kit) static(rt *host.Runtime, wasm []byte) bool {
	ok := true
	if len(wasm) > k.o.maxModuleBytes {
		k.rep.fail(CheckSize, fmt.Sprintf("the module is %d bytes; a server accepts at most %d (pawld --max-validator-bytes)", len(wasm), k.o.maxModuleBytes))
		ok = false
	} else {
		k.rep.pass(CheckSize, fmt.Sprintf("%d bytes of at most %d", len(wasm), k.o.maxModuleBytes))
	}
	err := rt.Check(wasm)
	var limit *host.LimitError
	var abiErr *host.ABIError
	switch {
	case errors.Is(err, host.ErrNotWasm):
		k.rep.fail(CheckFormat, err.Error())
		k.rep.skip("the module is not WebAssembly", CheckShape, CheckImports, CheckExports)
		return false
	case errors.As(err, &limit):
		k.rep.pass(CheckFormat, "")
		k.rep.fail(CheckShape, err.Error())
		k.rep.skip("the host stops at the module's shape", CheckImports, CheckExports)
		return false
	case errors.As(err, &abiErr):
		k.rep.pass(CheckFormat, "")
		k.rep.pass(CheckShape, "")
		k.problems(CheckImports, abiErr.Imports, "only functions of the allowed WASI subset (validators/ABI.md)")
		k.problems(CheckExports, abiErr.Exports, exportsWanted)
		return false
	case err != nil:
		k.rep.fail(CheckFormat, err.Error())
		k.rep.skip("the module could not be read", CheckShape, CheckImports, CheckExports)
		return false
	}
	k.rep.pass(CheckFormat, "")
	k.rep.pass(CheckShape, "within the module limits (pawld --validator-max-*)")
	k.rep.pass(CheckImports, "only functions of the allowed WASI subset")
	k.rep.pass(CheckExports, exportsWanted)
	return ok
}

const exportsWanted = "memory, pawl_abi_version () -> (i32), pawl_alloc (i32) -> (i32), pawl_validate (i32, i32) -> (i64)"

func (k *kit) problems(name string, problems []string, passed string) {
	if len(problems) > 0 {
		k.rep.fail(name, strings.Join(problems, "; "))
	} else {
		k.rep.pass(name, passed)
	}
}

// load compiles and instantiates the module, as an upload does after its
// static checks, and reads its ABI version.
func (k *kit) load(ctx context.Context, rt *host.Runtime, wasm []byte) (*host.Validator, error) {
	began := time.Now()
	v, err := rt.Load(ctx, host.Digest(wasm), wasm)
	var abiErr *host.ABIError
	switch {
	case errors.As(err, &abiErr) && abiErr.Version != "":
		k.rep.pass(CheckLoad, "")
		k.rep.fail(CheckVersion, abiErr.Version)
	case err != nil:
		k.rep.fail(CheckLoad, err.Error())
		k.rep.skip("the module did not load", CheckVersion)
	default:
		k.rep.pass(CheckLoad, fmt.Sprintf("compiled and instantiated in %s", time.Since(began).Round(time.Millisecond)))
		k.rep.pass(CheckVersion, fmt.Sprintf("pawl_abi_version returned %d", v.Info().ABIVersion))
	}
	return v, err
}

// input is one input of the calls: a case or a built-in one.
type input struct {
	name   string // with its prefix
	in     host.Input
	expect *Expectation // nil for built-in inputs

	fresh call // the first call, on a fresh instance
	again call // the second, on the same instance, if the first succeeded
}

// call is the outcome of one call.
type call struct {
	res host.Result
	err error
	dur time.Duration
}

func (c call) same(d call) bool {
	return c.err == nil && d.err == nil && reflect.DeepEqual(c.res, d.res)
}

func (c call) String() string {
	if c.err != nil {
		return "the call failed: " + c.err.Error()
	}
	b, _ := json.Marshal(c.res)
	return string(b)
}

// do runs in on v, timed.
func do(ctx context.Context, v *host.Validator, in host.Input) call {
	began := time.Now()
	res, err := v.Validate(ctx, in)
	return call{res: res, err: err, dur: time.Since(began)}
}

// largeName is the name of the large built-in input.
const largeName = "large"

// inputs are the cases, then the built-in inputs.
func (k *kit) inputs() []*input {
	var out []*input
	for _, c := range k.o.cases {
		in := c.Input
		if in.Params == nil {
			in.Params = k.o.params
		}
		out = append(out, &input{name: CasePrefix + c.Name, in: in, expect: &c.Expect})
	}
	builtin := func(name string, config []byte) {
		out = append(out, &input{name: InputPrefix + name, in: host.Input{Config: config, MediaType: DefaultMediaType, Params: k.o.params}})
	}
	builtin("empty", nil)
	builtin("not the media type", []byte("\x00\xff{[ not a config \"\\u"))
	builtin("deep nesting", []byte(strings.Repeat("[", nestingDepth)+strings.Repeat("]", nestingDepth)))
	large := make([]byte, 0, k.o.largeInput)
	large = append(large, '[')
	for len(large) < k.o.largeInput-2 {
		large = append(large, '0', ',')
	}
	builtin(largeName, append(large[:len(large)-1], ']'))
	return out
}

// calls runs every input on fresh and reused instances, then the limits'
// inputs, and reports the checks of calls. Only ctx's end is an error.
func (k *kit) calls(ctx context.Context, v *host.Validator) error {
	inputs := k.inputs()
	var ok []*input // inputs that gave a result
	for _, x := range inputs {
		v.DiscardIdle(ctx)
		x.fresh = do(ctx, v, x.in)
		if x.fresh.err == nil {
			ok = append(ok, x)
			x.again = do(ctx, v, x.in)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		k.reportInput(x)
	}
	k.reuse(ok)
	if err := k.isolation(ctx, v, ok); err != nil {
		return err
	}
	afterFailure, err := k.memory(ctx, v, inputs)
	if err != nil {
		return err
	}
	k.afterFailure(ctx, v, ok, afterFailure)
	k.time(inputs)
	k.output(inputs)
	return ctx.Err()
}

// reportInput reports a case's or a built-in input's check from its call
// on a fresh instance.
func (k *kit) reportInput(x *input) {
	c := Check{Name: x.name, Status: Pass}
	switch {
	case x.fresh.err != nil:
		c.Status, c.Detail = Fail, "the call failed: "+x.fresh.err.Error()
		if x.expect == nil {
			c.Detail += "; a module must return a verdict for any input"
		}
	case x.expect != nil:
		if err := x.expect.Match(x.fresh.res); err != nil {
			c.Status, c.Detail = Fail, strings.TrimPrefix(err.Error(), errMismatch.Error()+": ")
		}
	}
	if x.fresh.err == nil {
		res := x.fresh.res
		c.Result = &res
		if c.Status == Pass {
			c.Detail = fmt.Sprintf("%s, %d violation(s), in %s", verdict(res.Valid), len(res.Violations), x.fresh.dur.Round(time.Microsecond))
			if x.name == InputPrefix+largeName && x.again.err == nil {
				perMiB := time.Duration(float64(x.again.dur) * serverMaxValue / float64(len(x.in.Config)))
				c.Detail += fmt.Sprintf(" (a %d MiB config would take about %s, of the %s limit)", serverMaxValue>>20, perMiB.Round(time.Millisecond), k.o.timeout)
			}
		}
	}
	k.rep.Checks = append(k.rep.Checks, c)
}

// reuse compares each input's result on a fresh instance with its result
// on the same instance called again.
func (k *kit) reuse(ok []*input) {
	if len(ok) == 0 {
		k.rep.skip("no input gave a result", CheckReuse)
		return
	}
	var diffs []string
	for _, x := range ok {
		if !x.fresh.same(x.again) {
			diffs = append(diffs, fmt.Sprintf("%s: fresh %s, reused %s", x.name, x.fresh, x.again))
		}
	}
	k.verdicts(CheckReuse, diffs, fmt.Sprintf("%d inputs gave the same result on a fresh instance and on a reused one", len(ok)))
}

// isolation runs every input that gave a result on one instance, forwards
// and backwards, and compares each result with the fresh one: a module
// whose verdict depends on earlier calls (state kept between them) fails.
func (k *kit) isolation(ctx context.Context, v *host.Validator, ok []*input) error {
	if len(ok) < 2 {
		k.rep.skip("fewer than two inputs gave a result", CheckIsolation)
		return nil
	}
	v.DiscardIdle(ctx)
	var diffs []string
	differ := map[*input]bool{}
	order := append(slices.Clone(ok), ok...)
	slices.Reverse(order[len(ok):])
	for i, x := range order {
		got := do(ctx, v, x.in)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !x.fresh.same(got) && !differ[x] {
			differ[x] = true
			diffs = append(diffs, fmt.Sprintf("%s, after %d other call(s) on the instance: fresh %s, then %s", x.name, i, x.fresh, got))
		}
	}
	k.verdicts(CheckIsolation, diffs, fmt.Sprintf("%d inputs run one after another on one instance, forwards and backwards, gave their fresh results", len(ok)))
	return nil
}

// memory reports the memory limit: no input of the others exceeded it, and
// an input as large as the limit makes the call fail, contained by the
// host.
// It reports whether that call failed, discarding its instance.
func (k *kit) memory(ctx context.Context, v *host.Validator, inputs []*input) (bool, error) {
	for _, x := range inputs {
		if errors.Is(x.fresh.err, host.ErrMemoryLimit) {
			k.rep.fail(CheckMemory, fmt.Sprintf("%s exceeded the memory limit of %d MiB: %v", x.name, k.o.memoryLimit>>20, x.fresh.err))
			return false, nil
		}
	}
	huge := do(ctx, v, host.Input{Config: make([]byte, k.o.memoryLimit), MediaType: DefaultMediaType, Params: k.o.params})
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	desc := fmt.Sprintf("an input as large as the memory limit (%d MiB)", k.o.memoryLimit>>20)
	if huge.err == nil {
		k.rep.fail(CheckMemory, desc+" gave a result, which its memory cannot hold: "+huge.String())
	} else {
		// The memory limit, a trap, a refused allocation, or (the Go
		// runtime collects garbage at length before it gives up) the time
		// limit: the host contained the call, and discarded its instance.
		k.rep.pass(CheckMemory, fmt.Sprintf("every input within the limit; %s failed as it must: %v", desc, huge.err))
	}
	return huge.err != nil, nil
}

// afterFailure checks that after the failed call of the memory limit, the
// next (on a fresh instance, as the host discards a failed one) gives the
// same result as before.
func (k *kit) afterFailure(ctx context.Context, v *host.Validator, ok []*input, failed bool) {
	switch {
	case len(ok) == 0:
		k.rep.skip("no input gave a result", CheckAfterFailure)
		return
	case !failed:
		k.rep.skip("no call failed", CheckAfterFailure)
		return
	}
	var diffs []string
	for _, x := range ok {
		if got := do(ctx, v, x.in); !x.fresh.same(got) {
			diffs = append(diffs, fmt.Sprintf("%s: before %s, after %s", x.name, x.fresh, got))
		}
	}
	k.verdicts(CheckAfterFailure, diffs, fmt.Sprintf("after a call that failed, %d inputs gave the same results", len(ok)))
}

// time reports the time limit: no call ran out of it, and the slowest
// call on a reused instance.
func (k *kit) time(inputs []*input) {
	var slowest *input
	for _, x := range inputs {
		if errors.Is(x.fresh.err, host.ErrTimeout) {
			k.rep.fail(CheckTime, fmt.Sprintf("%s: %v", x.name, x.fresh.err))
			return
		}
		if x.fresh.err == nil && (slowest == nil || x.again.dur > slowest.again.dur) {
			slowest = x
		}
	}
	if slowest == nil {
		k.rep.skip("no input gave a result", CheckTime)
		return
	}
	k.rep.pass(CheckTime, fmt.Sprintf("slowest call on a reused instance: %s, %s of the %s limit", slowest.name, slowest.again.dur.Round(time.Microsecond), k.o.timeout))
}

// output reports the output limit: no result was over it, and the largest.
func (k *kit) output(inputs []*input) {
	largest := 0
	for _, x := range inputs {
		if errors.Is(x.fresh.err, host.ErrOutputTooLarge) {
			k.rep.fail(CheckOutput, fmt.Sprintf("%s: %v", x.name, x.fresh.err))
			return
		}
		if x.fresh.err == nil {
			b, _ := json.Marshal(x.fresh.res)
			largest = max(largest, len(b))
		}
	}
	k.rep.pass(CheckOutput, fmt.Sprintf("largest result about %d bytes of the %d limit", largest, k.o.maxOutput))
}

// maxDiffs is how many differences a check's detail shows.
const maxDiffs = 3

func (k *kit) verdicts(name string, diffs []string, passed string) {
	if len(diffs) > maxDiffs {
		diffs = append(diffs[:maxDiffs], fmt.Sprintf("and %d more", len(diffs)-maxDiffs))
	}
	if len(diffs) > 0 {
		k.rep.fail(name, strings.Join(diffs, "; "))
	} else {
		k.rep.pass(name, passed)
	}
}
